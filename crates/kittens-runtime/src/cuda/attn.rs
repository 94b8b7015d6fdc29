//! The attention forward on Hopper: the `attn_fwd` tile program (kittens-kernels, producer/consumer
//! schedule) lowered for sm_90a, compiled, launched by its argument list, checked on spot rows against
//! the f64 reference by the test rule (`kittens_kernels::reference::check_rule` against the
//! PyTorch-style bf16 baseline on the same rows), and timed with CUDA events.
//!
//! The tensor maps come from the tile program itself ([`super::args`]): each `TmaMap` of the lowering
//! names a global tensor, whose dims and element strides give the map's shape — so BSHD and BHSD are
//! the same kernel with other strides. A shape the tail planner splits (few query blocks against many
//! keys) runs the split kernel and its merge ([`super::attn_split`]).

use std::rc::Rc;

use kittens_codegen::Lowered;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::reference::{self, AttnShape, ErrorReport, Verdict};
use serde::Serialize;

use super::attn_split::{auto_splits, pack, workspace};
use super::bench::{bf16_to_f32, median, random_bf16};
use super::driver::{Device, DeviceBuffer, Event, Function, Stream};
use super::{compile, invalid, CudaCompileReport, CudaError};

/// The tensors of one attention launch, by the tile program's names; `work` holds a key split's
/// partials ([`super::attn_split::workspace`]).
pub struct AttnBuffers {
    pub q: DeviceBuffer,
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
    pub o: DeviceBuffer,
    pub work: Vec<(&'static str, DeviceBuffer)>,
}

impl AttnBuffers {
    fn by_name(&self, name: &str) -> Result<&DeviceBuffer, CudaError> {
        match name {
            "q" => Ok(&self.q),
            "k" => Ok(&self.k),
            "v" => Ok(&self.v),
            "o" => Ok(&self.o),
            _ => self
                .work
                .iter()
                .find(|w| w.0 == name)
                .map(|w| &w.1)
                .ok_or_else(|| {
                    invalid(format!(
                        "lowered attention takes an unknown tensor `{name}`"
                    ))
                }),
        }
    }
}

/// A compiled, loaded attention configuration: the kernel, or a key split's kernel and merge.
pub struct AttnKernel {
    launches: Vec<(Function, Lowered)>,
    /// The attention's lowering (the first launch).
    pub lowered: Lowered,
    pub compile: CudaCompileReport,
    /// Blocks of the persistent grid resident at once (one per SM).
    pub resident: u32,
    /// Key parts (1: no split, one launch).
    pub kv_splits: u32,
}

/// The parameters of `attn_fwd` for a shape with as many keys as queries, in the tile program's
/// names.
pub fn params(sh: &AttnShape) -> [(&'static str, i64); 5] {
    params_kv(sh, sh.seq)
}

/// The parameters of `attn_fwd` for `sh.seq` queries and `seq_kv` keys.
pub fn params_kv(sh: &AttnShape, seq_kv: usize) -> [(&'static str, i64); 5] {
    [
        ("batch", sh.batch as i64),
        ("heads", sh.heads as i64),
        ("heads_kv", sh.heads_kv as i64),
        ("seq", sh.seq as i64),
        ("seq_kv", seq_kv as i64),
    ]
}

/// Shapes the Hopper program takes (as many keys as queries), checked before anything is allocated.
pub fn check_shape(sh: &AttnShape) -> Result<(), CudaError> {
    check_shape_kv(sh, sh.seq)
}

/// Shapes the Hopper program takes with `seq_kv` keys: K and V are bounded like Q.
pub fn check_shape_kv(sh: &AttnShape, seq_kv: usize) -> Result<(), CudaError> {
    check_shape_q(sh)?;
    if seq_kv == 0 {
        return Err(invalid(format!("no keys (seq_kv 0) for {sh:?}")));
    }
    check_shape_q(&AttnShape {
        seq: seq_kv,
        heads: sh.heads_kv,
        ..*sh
    })
    .map_err(|e| invalid(format!("keys: {e}")))
}

fn check_shape_q(sh: &AttnShape) -> Result<(), CudaError> {
    if sh.dim != 64 && sh.dim != 128 {
        return Err(invalid(format!(
            "head dimension {} (the Hopper attention takes 64 or 128)",
            sh.dim
        )));
    }
    if sh.batch == 0 || sh.heads == 0 || sh.heads_kv == 0 || sh.seq == 0 {
        return Err(invalid(format!("empty attention problem {sh:?}")));
    }
    if !sh.heads.is_multiple_of(sh.heads_kv) {
        return Err(invalid(format!(
            "heads_kv {} must divide heads {}",
            sh.heads_kv, sh.heads
        )));
    }
    // Element offsets and TMA coordinates are 32-bit in the kernel.
    let elems = (sh.batch as u64)
        .checked_mul(sh.heads as u64)
        .and_then(|x| x.checked_mul(sh.seq as u64))
        .and_then(|x| x.checked_mul(sh.dim as u64));
    match elems {
        Some(n) if n < 1u64 << 31 => Ok(()),
        _ => Err(invalid(format!(
            "{sh:?}: at most 2^31 elements per tensor (32-bit strides)"
        ))),
    }
}

impl AttnKernel {
    /// Compiles (NVRTC, cached) and loads the lowered launches on `dev` (the attention; or a key
    /// split's kernel and merge, [`super::attn_split::lower_launches`]).
    pub fn prepare(dev: &Rc<Device>, ls: &[Lowered]) -> Result<AttnKernel, CudaError> {
        let mut launches = Vec::new();
        let mut first = None;
        for l in ls {
            let shared = l.dynamic_shared_bytes();
            let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
            let module = dev.load_module(&image.cubin)?;
            launches.push((module.function(&l.entry, shared)?, l.clone()));
            first.get_or_insert(image.report);
        }
        let lowered = ls.first().ok_or_else(|| invalid("no launch"))?.clone();
        let kv_splits = lowered
            .ir
            .globals
            .iter()
            .find(|g| g.name == kittens_kernels::attn_fwd::split::O_PARTIAL)
            .and_then(|g| g.dims[0].as_const())
            .map_or(1, |g| g as u32);
        Ok(AttnKernel {
            launches,
            lowered,
            compile: first.ok_or_else(|| invalid("no launch"))?,
            resident: dev.multiprocessors,
            kv_splits,
        })
    }

    /// The launches on `bufs` at shape `sh`, in order: the arguments in each lowering's order
    /// (tensor maps, pointers, parameters; [`super::attn_split::pack`]); unknown names are refused.
    pub fn launch(
        &self,
        stream: &Stream,
        bufs: &AttnBuffers,
        sh: &AttnShape,
    ) -> Result<(), CudaError> {
        check_shape(sh)?;
        let values = params(sh);
        let tensor = |name: &str| {
            let b = bufs.by_name(name)?;
            Ok((b.ptr(), b.bytes() as u64))
        };
        for (f, l) in &self.launches {
            let (mut args, grid) = pack(l, &values, &tensor, self.resident)?;
            let mut pointers = args.pointers();
            // SAFETY: one pointer per kernel argument in the lowering's order and types (tensor
            // maps by value, 64-bit device pointers, 32-bit integers); the buffers hold the shape's
            // tensors and the split's workspace (the maps checked against them); `args` lives until
            // the launch returns.
            unsafe { f.launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut pointers)? };
        }
        Ok(())
    }
}

/// One benchmark or check shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttnCase {
    pub shape: AttnShape,
    pub causal: bool,
    /// Inputs uniform in [-scale, scale) (8 at head dim 64 gives logits of about ±64).
    pub input_scale: f32,
    /// Timed, or checked only.
    pub timed: bool,
    /// The consumer warpgroups take turns on the tensor cores (`AttnConfig::pingpong`).
    pub pingpong: bool,
    /// The key loop rotated so that the softmax overlaps P·V (`AttnConfig::overlap`).
    pub overlap: bool,
    /// Q in two slots used by alternate tiles of a block (`AttnConfig::q_double`).
    pub q_double: bool,
    /// The key split: `auto` (where the tail planner says it pays on the device) or a count.
    pub kv_splits: KvSplits,
}

/// Options of [`run_attn_bench`].
#[derive(Debug, Clone)]
pub struct AttnBenchOptions {
    pub cases: Vec<AttnCase>,
    pub iters: usize,
    pub warmup: usize,
    /// Output rows compared with the f64 reference per case (first and last rows always among them).
    pub spot_rows: usize,
}

/// What one case measured.
#[derive(Debug, Clone, Serialize)]
pub struct AttnBenchRow {
    pub case: AttnCase,
    pub kernel: String,
    /// Key parts the launch used (1: unsplit).
    pub kv_splits: u32,
    pub registers: u32,
    pub spills: u32,
    pub rows_checked: usize,
    pub error: ErrorReport,
    pub baseline: ErrorReport,
    pub checks: Vec<(&'static str, Verdict)>,
    pub passed: bool,
    pub max_abs_logit: f64,
    /// Median of the timed launches, milliseconds (absent for check-only cases).
    pub ms: Option<f64>,
    /// `4·B·H·N²·D` (halved when causal) over the median time.
    pub tflops: Option<f64>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct AttnBenchReport {
    pub device: String,
    pub rows: Vec<AttnBenchRow>,
}

/// The case's configuration of `attn_fwd` for sm_90a (head dimension, mask, layout, the schedule's
/// options), unsplit.
fn config_for(case: &AttnCase) -> Result<AttnConfig, CudaError> {
    let h100 = kittens_hw::gpu("h100").map_err(invalid)?;
    Ok(AttnConfig {
        dim: case.shape.dim as u32,
        causal: case.causal,
        layout: case.shape.layout,
        pingpong: case.pingpong,
        overlap: case.overlap,
        q_double: case.q_double,
        ..AttnConfig::for_gpu(h100)
    })
}

/// Builds and lowers `attn_fwd` for sm_90a at the case's head dimension, mask and layout (unsplit).
pub fn lower_for(case: &AttnCase) -> Result<Lowered, CudaError> {
    let k = kittens_kernels::attn_fwd::build(&config_for(case)?).map_err(invalid)?;
    kittens_codegen::lower(&k, kittens_hw::Target::Sm90a).map_err(invalid)
}

/// The case's launches on a device of `sms` SMs: [`lower_for`]'s kernel, or with the key split the
/// planner (or the case) asks for, the split kernel and its merge.
pub fn launches_for(case: &AttnCase, sms: u32) -> Result<Vec<Lowered>, CudaError> {
    let cfg = config_for(case)?;
    let sh = &case.shape;
    let kv_splits = auto_splits(case.kv_splits, sms, &cfg, sh, sh.seq)?;
    super::attn_split::lower_launches(&AttnConfig { kv_splits, ..cfg })
}

/// Runs every case on device 0.
pub fn run_attn_bench(opts: &AttnBenchOptions) -> Result<AttnBenchReport, CudaError> {
    let dev = Device::open(0)?;
    let stream = Stream::new()?;
    let mut rows = Vec::new();
    for case in &opts.cases {
        check_shape(&case.shape)?;
        let kernel = AttnKernel::prepare(&dev, &launches_for(case, dev.multiprocessors)?)?;
        rows.push(run_case(&dev, &stream, &kernel, case, opts)?);
        let r = rows.last().expect("pushed");
        eprintln!(
            "{:?} causal={} pingpong={} overlap={} q_double={} scale {}: rel_err {:.2e} (baseline {:.2e}) {} {}",
            case.shape,
            case.causal,
            case.pingpong,
            case.overlap,
            case.q_double,
            case.input_scale,
            r.error.rel_err,
            r.baseline.rel_err,
            if r.passed { "pass" } else { "FAIL" },
            r.tflops.map_or(String::new(), |t| format!(
                "{t:.1} TFLOP/s ({:.3} ms)",
                r.ms.unwrap_or(0.0)
            ))
        );
    }
    Ok(AttnBenchReport {
        device: dev.name.clone(),
        rows,
    })
}

fn run_case(
    dev: &Rc<Device>,
    stream: &Stream,
    kernel: &AttnKernel,
    case: &AttnCase,
    opts: &AttnBenchOptions,
) -> Result<AttnBenchRow, CudaError> {
    let sh = case.shape;
    let (nq, nkv) = (sh.len(sh.heads), sh.len(sh.heads_kv));
    let seed = (sh.seq * 131 + sh.dim * 7 + sh.heads) as u64;
    let scaled = |len, seed| -> Vec<u16> {
        let v = random_bf16(len, seed);
        if case.input_scale == 1.0 {
            return v;
        }
        // A power-of-two scale keeps the values exact in bf16.
        v.into_iter()
            .map(|x| super::bench::f32_to_bf16(bf16_to_f32(x) * case.input_scale))
            .collect()
    };
    let (hq, hk, hv) = (
        scaled(nq, seed),
        scaled(nkv, seed + 1),
        scaled(nkv, seed + 2),
    );
    let upload = |h: &[u16]| -> Result<DeviceBuffer, CudaError> {
        let mut b = dev.alloc(h.len() * 2)?;
        b.upload(h)?;
        Ok(b)
    };
    let mut o = dev.alloc(nq * 2)?;
    o.fill_u16(0x7fc0)?; // NaN: a row the kernel does not write fails the check
    let mut work = Vec::new();
    for (name, bytes) in workspace(kernel.kv_splits, &sh)? {
        work.push((name, dev.alloc(bytes as usize)?));
    }
    let bufs = AttnBuffers {
        q: upload(&hq)?,
        k: upload(&hk)?,
        v: upload(&hv)?,
        o,
        work,
    };
    kernel.launch(stream, &bufs, &sh)?;
    stream.synchronize()?;
    let mut out = vec![0u16; nq];
    bufs.o.download(&mut out)?;

    // Spot rows: the first, the last, and a spread between (every batch and head visited in turn).
    let total = sh.batch * sh.heads * sh.seq;
    let n = opts.spot_rows.clamp(2, total);
    let pick: Vec<(usize, usize, usize)> = (0..n)
        .map(|r| {
            let flat = if r + 1 == n {
                total - 1
            } else {
                (r as u64 * 2_654_435_761u64 % total as u64) as usize
            };
            let flat = if r == 0 { 0 } else { flat };
            (
                flat / (sh.heads * sh.seq),
                flat / sh.seq % sh.heads,
                flat % sh.seq,
            )
        })
        .collect();
    let f = |h: &[u16]| h.iter().map(|&x| bf16_to_f32(x)).collect::<Vec<f32>>();
    let (q, k, v) = (f(&hq), f(&hk), f(&hv));
    let (mut ours, mut refr, mut base) = (Vec::new(), Vec::new(), Vec::new());
    let (mut p64, mut p32) = (vec![0.0f64; sh.seq], vec![0.0f32; sh.seq]);
    let (mut r64, mut r32) = (vec![0.0f64; sh.dim], vec![0.0f32; sh.dim]);
    let mut max_logit = 0.0f64;
    for &(b, h, i) in &pick {
        let l =
            reference::attention_row(&q, &k, &v, &sh, case.causal, (b, h, i), &mut p64, &mut r64);
        max_logit = max_logit.max(l);
        reference::attention_bf16_baseline_row(
            &q,
            &k,
            &v,
            &sh,
            case.causal,
            (b, h, i),
            &mut p32,
            &mut r32,
        );
        refr.extend_from_slice(&r64);
        base.extend_from_slice(&r32);
        ours.extend((0..sh.dim).map(|x| bf16_to_f32(out[sh.offset(sh.heads, b, h, i, x)])));
    }
    let error = reference::compare(&ours, &refr);
    let baseline = reference::compare(&base, &refr);
    let checks = vec![
        (
            "rel_err",
            reference::check_rule(error.rel_err, baseline.rel_err, reference::RULE_FLOOR),
        ),
        (
            "max_rel",
            reference::check_rule(error.max_rel, baseline.max_rel, reference::RULE_FLOOR),
        ),
    ];
    let passed = checks.iter().all(|(_, c)| c.passed);

    let (mut ms, mut tflops) = (None, None);
    if case.timed {
        for _ in 0..opts.warmup {
            kernel.launch(stream, &bufs, &sh)?;
        }
        let (start, end) = (Event::new()?, Event::new()?);
        let mut times = Vec::with_capacity(opts.iters);
        for _ in 0..opts.iters.max(1) {
            start.record(stream)?;
            kernel.launch(stream, &bufs, &sh)?;
            end.record(stream)?;
            stream.synchronize()?;
            times.push(start.elapsed_ms(&end)? as f64);
        }
        let t = median(&mut times);
        let mut flops =
            4.0 * (sh.batch * sh.heads) as f64 * (sh.seq as f64).powi(2) * sh.dim as f64;
        if case.causal {
            flops /= 2.0;
        }
        ms = Some(t);
        tflops = Some(flops / (t * 1e-3) / 1e12);
    }
    let r = &kernel.compile;
    Ok(AttnBenchRow {
        case: *case,
        kernel: kernel.lowered.entry.clone(),
        kv_splits: kernel.kv_splits,
        registers: r.registers,
        spills: r.spill_stores + r.spill_loads,
        rows_checked: pick.len(),
        error,
        baseline,
        checks,
        passed,
        max_abs_logit: max_logit,
        ms,
        tflops,
    })
}

/// The benchmark's shapes: B16 H16 D128 at N 1024..16384 causal and not (16384 at B2 H24 to bound the
/// host reference's memory), D64, GQA H64/KV8, both layouts; plus check-only cases at odd lengths
/// with logits to ±64. Each case with the registry's setting of the warpgroups' turns
/// and loop form (`AttnConfig::for_gpu(h100)`: `pingpong`, `overlap`).
pub fn default_cases() -> Vec<AttnCase> {
    let (turns, overlap, q_double) = kittens_hw::gpu("h100")
        .map(AttnConfig::for_gpu)
        .map(|c| (c.pingpong, c.overlap, c.q_double))
        .unwrap_or((false, false, false));
    let shape = |batch, heads, heads_kv, seq, dim, layout| AttnShape {
        batch,
        heads,
        heads_kv,
        seq,
        dim,
        layout,
    };
    let timed = |shape, causal| AttnCase {
        shape,
        causal,
        input_scale: 1.0,
        timed: true,
        pingpong: turns,
        overlap,
        q_double,
        kv_splits: KvSplits::Auto,
    };
    let check = |shape, causal| AttnCase {
        shape,
        causal,
        input_scale: 8.0,
        timed: false,
        pingpong: turns,
        overlap,
        q_double,
        kv_splits: KvSplits::Auto,
    };
    let mut v = Vec::new();
    for causal in [false, true] {
        for n in [1024, 2048, 4096, 8192] {
            v.push(timed(shape(16, 16, 16, n, 128, AttnLayout::Bshd), causal));
        }
        v.push(timed(
            shape(2, 24, 24, 16384, 128, AttnLayout::Bshd),
            causal,
        ));
        v.push(timed(shape(16, 16, 16, 4096, 64, AttnLayout::Bshd), causal));
        v.push(timed(shape(4, 64, 8, 4096, 128, AttnLayout::Bhsd), causal));
    }
    for (causal, dim, layout) in [
        (false, 64, AttnLayout::Bshd),
        (true, 64, AttnLayout::Bhsd),
        (false, 128, AttnLayout::Bhsd),
        (true, 128, AttnLayout::Bshd),
    ] {
        v.push(check(shape(2, 6, 1, 1000 + dim - 1, dim, layout), causal));
        v.push(check(shape(1, 8, 2, 77, dim, layout), causal));
        v.push(check(shape(1, 2, 2, 1, dim, layout), causal));
    }
    v
}
