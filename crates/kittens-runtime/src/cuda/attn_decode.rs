//! Decoding on the GPU: the attention forward with the key split (`kittens_kernels::attn_fwd::split`,
//! Flash-Decoding) against the same kernel unsplit, on the same inputs. Each case runs both; O and the
//! log-sum-exp of each are judged over every element by the test rule against the f64 forward (the
//! PyTorch-style bf16 forward the baseline), and both are timed with CUDA events (median of the
//! launches; the split's time includes its merge). `kittens bench attn_fwd --checks decode` runs them.

use kittens_ir::Rounding;
use kittens_kernels::attn_bwd::{BwdShape, Causal};
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::reference::{AttnShape, ErrorReport, Verdict};
use serde::Serialize;

use super::attn::check_shape_kv;
use super::attn_lse::Checked;
use super::attn_split::{auto_splits, Prepared};
use super::bench::median;
use super::driver::{Device, Event, Stream};
use super::{invalid, CudaError};

/// One decoding shape: `shape.seq` queries against `seq_kv` keys.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DecodeCase {
    pub shape: AttnShape,
    pub seq_kv: usize,
    pub causal: Causal,
    /// The split timed against the unsplit kernel: `auto` (the planner's count for the device) or
    /// a fixed count (when the planner declines, 1: the case is then checked and timed unsplit only).
    pub kv_splits: KvSplits,
}

/// One launch configuration's result: its parts, errors and verdicts, time.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeRun {
    pub kv_splits: u32,
    pub kernels: Vec<String>,
    pub spills: u32,
    pub o: (ErrorReport, ErrorReport),
    pub lse: (ErrorReport, ErrorReport),
    pub checks: Vec<(&'static str, Verdict)>,
    pub passed: bool,
    /// Median milliseconds of the launches (all of a split run's).
    pub ms: f64,
}

/// What one case found: the unsplit kernel and the split one.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeRow {
    pub case: DecodeCase,
    pub unsplit: DecodeRun,
    pub split: Option<DecodeRun>,
    /// Unsplit time over split time.
    pub speedup: Option<f64>,
    pub passed: bool,
}

/// The decoding shapes at D128: B1 H32 against 32768 keys, B4 H32/KV8 against 8192, and 16
/// queries bottom-right against 4096 (GQA 32/8). (The host's f64 reference bounds the lengths: the
/// first case's inputs alone are 268 M keys and values.)
pub fn decode_cases() -> Vec<DecodeCase> {
    let case = |batch, heads, heads_kv, seq, seq_kv, causal| DecodeCase {
        shape: AttnShape {
            batch,
            heads,
            heads_kv,
            seq,
            dim: 128,
            layout: AttnLayout::Bshd,
        },
        seq_kv,
        causal,
        kv_splits: KvSplits::Auto,
    };
    vec![
        case(1, 32, 32, 1, 32768, Causal::No),
        case(4, 32, 8, 1, 8192, Causal::No),
        case(1, 32, 8, 16, 4096, Causal::BottomRight),
    ]
}

/// Runs every case on device 0: `iters` timed launches after `warmup`.
pub fn run_decode_checks(
    cases: &[DecodeCase],
    iters: usize,
    warmup: usize,
) -> Result<Vec<DecodeRow>, CudaError> {
    let dev = Device::open(0)?;
    let stream = Stream::new()?;
    let mut rows = Vec::new();
    for c in cases {
        let r = run_case(&dev, &stream, c, iters.max(1), warmup)?;
        eprintln!(
            "{:?} seq_kv {} {:?}: unsplit {:.3} ms{} {}",
            c.shape,
            c.seq_kv,
            c.causal,
            r.unsplit.ms,
            r.split.as_ref().map_or(String::new(), |s| format!(
                ", split {} {:.3} ms ({:.2}x)",
                s.kv_splits,
                s.ms,
                r.speedup.unwrap_or(0.0)
            )),
            if r.passed { "pass" } else { "FAIL" }
        );
        rows.push(r);
    }
    Ok(rows)
}

fn run_case(
    dev: &std::rc::Rc<Device>,
    stream: &Stream,
    c: &DecodeCase,
    iters: usize,
    warmup: usize,
) -> Result<DecodeRow, CudaError> {
    let sh = c.shape;
    check_shape_kv(&sh, c.seq_kv)?;
    let bsh = BwdShape {
        batch: sh.batch,
        heads: sh.heads,
        heads_kv: sh.heads_kv,
        seq_q: sh.seq,
        seq_kv: c.seq_kv,
        dim: sh.dim,
        layout: sh.layout,
    };
    let seed = (sh.seq * 131 + c.seq_kv * 7 + sh.dim + sh.heads) as u64;
    let data = Checked::draw(&bsh, c.causal, Rounding::Rtne, seed);
    let h100 = kittens_hw::gpu("h100").map_err(invalid)?;
    let cfg = AttnConfig {
        dim: sh.dim as u32,
        causal: c.causal != Causal::No,
        bottom_right: c.causal == Causal::BottomRight,
        layout: sh.layout,
        lse: true,
        ..AttnConfig::for_gpu(h100)
    };
    let g = auto_splits(c.kv_splits, dev.multiprocessors, &cfg, &sh, c.seq_kv)?;
    let mut runs = Vec::new();
    for kv_splits in if g > 1 { vec![1, g] } else { vec![1] } {
        let cfg = AttnConfig { kv_splits, ..cfg };
        let p = Prepared::new(dev, &cfg, &sh, c.seq_kv, data.inputs())?;
        p.enqueue(stream)?;
        stream.synchronize()?;
        let (o, lse) = p.read()?;
        let (o_err, lse_err, checks) = data.judge(&o, &lse);
        for _ in 0..warmup {
            p.enqueue(stream)?;
        }
        let (start, end) = (Event::new()?, Event::new()?);
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            start.record(stream)?;
            p.enqueue(stream)?;
            end.record(stream)?;
            stream.synchronize()?;
            times.push(start.elapsed_ms(&end)? as f64);
        }
        let reports = p.reports();
        runs.push(DecodeRun {
            kv_splits,
            kernels: reports.iter().map(|r| r.0.to_string()).collect(),
            spills: reports
                .iter()
                .map(|(_, r)| r.spill_stores + r.spill_loads)
                .sum(),
            passed: checks.iter().all(|(_, v)| v.passed),
            o: o_err,
            lse: lse_err,
            checks,
            ms: median(&mut times),
        });
    }
    let unsplit = runs.remove(0);
    let split = runs.pop();
    let speedup = split.as_ref().map(|s| unsplit.ms / s.ms);
    let passed = unsplit.passed && split.as_ref().is_none_or(|s| s.passed);
    Ok(DecodeRow {
        case: *c,
        unsplit,
        split,
        speedup,
        passed,
    })
}
