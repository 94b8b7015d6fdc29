//! Checks of the attention forward's log-sum-exp output, query and key lengths that differ and the
//! bottom-right causal mask on the GPU: each case lowered for sm_90a (`AttnConfig::for_gpu` with
//! `lse`, `bottom_right`), launched on random bf16 inputs with logits to ±64, and O and the log-sum-exp
//! each judged over every element by the test rule against the f64 forward, the PyTorch-style bf16
//! forward being the baseline (`kittens_kernels::reference_fwd`), as the CPU runner judges them.
//! `kittens bench attn_fwd --checks lse` runs them (short shapes: also the sanitizers' case).

use kittens_ir::Rounding;
use kittens_kernels::attn_bwd::{BwdShape, Causal};
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::reference::{self, ErrorReport, Verdict};
use kittens_kernels::reference_fwd;
use serde::Serialize;

use super::attn::check_shape_kv;
use super::attn_split::{auto_splits, Prepared};
use super::bench_check::{bf16_to_f32, f32_to_bf16, random_bf16};
use super::driver::{Device, Stream};
use super::{invalid, CudaError};
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::reference::AttnShape;

/// One case: `shape.seq` queries against `seq_kv` keys.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LseCase {
    pub shape: AttnShape,
    pub seq_kv: usize,
    pub causal: Causal,
    /// The output's rounding; with RTNA or RTZ the case also runs the RTNE kernel on the same
    /// inputs and checks that the two rounded the same f32 values ([`rounding_agrees`]).
    #[serde(serialize_with = "rounding_name")]
    pub rounding: Rounding,
    /// The key split: `auto` (the planner's choice for the device, 1 where it does not pay) or a
    /// fixed count.
    pub kv_splits: KvSplits,
}

fn rounding_name<S: serde::Serializer>(r: &Rounding, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match r {
        Rounding::Rtne => "rtne",
        Rounding::Rtna => "rtna",
        Rounding::Rtz => "rtz",
    })
}

/// Whether `other` (RTNA or RTZ) and `rtne` (bf16 bits) are the same f32 values rounded two ways:
/// RTZ never larger in magnitude than RTNE and at most one bf16 step from it, RTNA equal except at
/// exact ties (then one step larger in magnitude); and RTZ differs from RTNE at some elements.
fn rounding_agrees(mode: Rounding, other: &[u16], rtne: &[u16]) -> bool {
    let mag = |b: u16| b & 0x7fff;
    let mut differ = 0usize;
    for (&o, &e) in other.iter().zip(rtne) {
        if o == e {
            continue;
        }
        differ += 1;
        let same_sign = (o ^ e) & 0x8000 == 0;
        let ok = match mode {
            Rounding::Rtz => same_sign && mag(o) + 1 == mag(e),
            Rounding::Rtna => same_sign && mag(o) == mag(e) + 1,
            Rounding::Rtne => false,
        };
        if !ok {
            return false;
        }
    }
    match mode {
        Rounding::Rtz => differ > other.len() / 4,
        Rounding::Rtna => differ < other.len() / 50,
        Rounding::Rtne => true,
    }
}

/// What one case found: each output's error and its baseline's, and the rule's verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct LseRow {
    pub case: LseCase,
    /// The key parts the launch used.
    pub kv_splits: u32,
    pub kernel: String,
    pub registers: u32,
    pub spills: u32,
    pub o: (ErrorReport, ErrorReport),
    pub lse: (ErrorReport, ErrorReport),
    pub checks: Vec<(&'static str, Verdict)>,
    pub passed: bool,
}

/// Odd lengths both ways, decoding (one query), both alignments, GQA, D64 and D128, both layouts.
pub fn lse_cases() -> Vec<LseCase> {
    let mut v = Vec::new();
    let shape = |heads, heads_kv, seq, dim, layout| AttnShape {
        batch: 2,
        heads,
        heads_kv,
        seq,
        dim,
        layout,
    };
    for (seq, seq_kv, causal, dim, layout) in [
        (1, 1063, Causal::No, 128, AttnLayout::Bshd),
        (1, 777, Causal::BottomRight, 64, AttnLayout::Bhsd),
        (300, 77, Causal::BottomRight, 128, AttnLayout::Bhsd),
        (77, 300, Causal::BottomRight, 64, AttnLayout::Bshd),
        (300, 133, Causal::TopLeft, 128, AttnLayout::Bshd),
        (257, 257, Causal::TopLeft, 64, AttnLayout::Bhsd),
        (200, 513, Causal::No, 128, AttnLayout::Bhsd),
    ] {
        v.push(LseCase {
            shape: shape(4, 2, seq, dim, layout),
            seq_kv,
            causal,
            rounding: Rounding::Rtne,
            kv_splits: KvSplits::Auto,
        });
    }
    // More tiles than SMs: blocks run several tiles, so Q's slots alternate (`AttnConfig::q_double`).
    v.push(LseCase {
        shape: AttnShape {
            batch: 4,
            heads: 16,
            heads_kv: 8,
            seq: 600,
            dim: 64,
            layout: AttnLayout::Bshd,
        },
        seq_kv: 600,
        causal: Causal::TopLeft,
        rounding: Rounding::Rtne,
        kv_splits: KvSplits::Auto,
    });
    for rounding in [Rounding::Rtz, Rounding::Rtna] {
        v.push(LseCase {
            shape: shape(4, 2, 333, 128, AttnLayout::Bshd),
            seq_kv: 333,
            causal: Causal::TopLeft,
            rounding,
            kv_splits: KvSplits::Auto,
        });
    }
    // The key split (Flash-Decoding): decoding shapes the planner splits, and forced counts at odd
    // lengths — more parts than key blocks, a causal limit inside the parts, rows with no key
    // (bottom-right, more queries than keys), GQA, both layouts, each rounding of the merge.
    use {AttnLayout::*, Causal::*, KvSplits::*, Rounding::*};
    #[rustfmt::skip]
    let split = [
        // b, h, h_kv, seq, seq_kv, mask, dim, layout, split, rounding
        (1, 16, 16, 1, 8192, No, 128, Bshd, Auto, Rtne),
        (2, 8, 2, 3, 4000, BottomRight, 64, Bhsd, Auto, Rtne),
        (1, 32, 8, 16, 2048, BottomRight, 128, Bshd, Auto, Rtne),
        (2, 4, 2, 1, 3001, No, 64, Bshd, Fixed(8), Rtne),
        (2, 4, 2, 77, 1000, BottomRight, 128, Bhsd, Fixed(5), Rtz),
        (2, 4, 1, 77, 63, BottomRight, 64, Bshd, Fixed(3), Rtna),
        (1, 8, 8, 3, 1000, TopLeft, 64, Bhsd, Fixed(2), Rtne),
        (2, 6, 3, 300, 3001, TopLeft, 128, Bshd, Fixed(4), Rtne),
    ];
    for (batch, heads, heads_kv, seq, seq_kv, causal, dim, layout, kv_splits, rounding) in split {
        v.push(LseCase {
            shape: AttnShape {
                batch,
                heads,
                heads_kv,
                seq,
                dim,
                layout,
            },
            seq_kv,
            causal,
            rounding,
            kv_splits,
        });
    }
    v
}

/// Runs every case on device 0.
pub fn run_lse_checks(cases: &[LseCase]) -> Result<Vec<LseRow>, CudaError> {
    let dev = Device::open(0)?;
    let stream = Stream::new()?;
    let mut rows = Vec::new();
    for c in cases {
        let r = run_case(&dev, &stream, c)?;
        eprintln!(
            "{:?} seq_kv {} {:?}: O rel_err {:.2e} (baseline {:.2e}), lse rel_err {:.2e} (baseline {:.2e}) {}",
            c.shape,
            c.seq_kv,
            c.causal,
            r.o.0.rel_err,
            r.o.1.rel_err,
            r.lse.0.rel_err,
            r.lse.1.rel_err,
            if r.passed { "pass" } else { "FAIL" }
        );
        rows.push(r);
    }
    Ok(rows)
}

/// The case's kernel (with the log-sum-exp) at `rounding`, compiled and launched on the inputs: its
/// O (bf16 bits), log-sum-exp, entry name and compile report.
struct Launched {
    o: Vec<u16>,
    lse: Vec<f32>,
    entry: String,
    report: super::CudaCompileReport,
    kv_splits: u32,
    /// Spilled registers of every launch together.
    spills: u32,
}

fn bwd_shape(c: &LseCase) -> BwdShape {
    let sh = c.shape;
    BwdShape {
        batch: sh.batch,
        heads: sh.heads,
        heads_kv: sh.heads_kv,
        seq_q: sh.seq,
        seq_kv: c.seq_kv,
        dim: sh.dim,
        layout: sh.layout,
    }
}

fn launch(
    dev: &std::rc::Rc<Device>,
    stream: &Stream,
    c: &LseCase,
    rounding: Rounding,
    inputs: (&[u16], &[u16], &[u16]),
) -> Result<Launched, CudaError> {
    let sh = c.shape;
    let h100 = kittens_hw::gpu("h100").map_err(invalid)?;
    let cfg = AttnConfig {
        dim: sh.dim as u32,
        causal: c.causal != Causal::No,
        bottom_right: c.causal == Causal::BottomRight,
        layout: sh.layout,
        lse: true,
        rounding,
        ..AttnConfig::for_gpu(h100)
    };
    // The key split the planner picks for this device (or the case's own count).
    let kv_splits = auto_splits(c.kv_splits, dev.multiprocessors, &cfg, &sh, c.seq_kv)?;
    let cfg = AttnConfig { kv_splits, ..cfg };
    let run = Prepared::new(dev, &cfg, &sh, c.seq_kv, inputs)?;
    run.enqueue(stream)?;
    stream.synchronize()?;
    let (o, lse) = run.read()?;
    let reports = run.reports();
    Ok(Launched {
        o,
        lse,
        entry: reports.iter().map(|r| r.0).collect::<Vec<_>>().join(" + "),
        // The attention's registers; the spills of every launch below.
        report: reports[0].1.clone(),
        kv_splits,
        spills: reports
            .iter()
            .map(|(_, r)| r.spill_stores + r.spill_loads)
            .sum(),
    })
}

/// One check's inputs (uniform bf16 times 8, exact in bf16: logits past ±64) and what they are judged
/// against: the f64 forward and the PyTorch-style bf16 forward, computed side by side.
pub(crate) struct Checked {
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
    ref_o: Vec<f64>,
    ref_lse: Vec<f64>,
    base_o: Vec<f32>,
    base_lse: Vec<f32>,
}

/// O's and the log-sum-exp's errors (ours, the baseline's) and the rule's verdicts on them.
pub(crate) type Judged = (
    (ErrorReport, ErrorReport),
    (ErrorReport, ErrorReport),
    Vec<(&'static str, Verdict)>,
);

impl Checked {
    /// Inputs at `sh` from `seed`; the baseline rounds its output as the kernel does (`rounding`).
    pub(crate) fn draw(sh: &BwdShape, causal: Causal, rounding: Rounding, seed: u64) -> Checked {
        let draw = |len, seed| -> Vec<u16> {
            random_bf16(len, seed)
                .into_iter()
                .map(|x| f32_to_bf16(bf16_to_f32(x) * 8.0))
                .collect()
        };
        let (q, k, v) = (
            draw(sh.q_len(), seed),
            draw(sh.kv_len(), seed + 1),
            draw(sh.kv_len(), seed + 2),
        );
        let f = |h: &[u16]| h.iter().map(|&x| bf16_to_f32(x)).collect::<Vec<f32>>();
        let (qf, kf, vf) = (f(&q), f(&k), f(&v));
        // Each reference is one thread's work: the two side by side.
        let ((ref_o, ref_lse, _), (base_o, base_lse)) = std::thread::scope(|s| {
            let exact = s.spawn(|| reference_fwd::forward(&qf, &kf, &vf, sh, causal));
            let base = reference_fwd::forward_bf16_baseline(&qf, &kf, &vf, sh, causal, rounding);
            (exact.join().expect("the f64 reference thread"), base)
        });
        Checked {
            q,
            k,
            v,
            ref_o,
            ref_lse,
            base_o,
            base_lse,
        }
    }

    pub(crate) fn inputs(&self) -> (&[u16], &[u16], &[u16]) {
        (&self.q, &self.k, &self.v)
    }

    /// `o` (bf16 bits) and `lse` judged by the rule, every element.
    pub(crate) fn judge(&self, o: &[u16], lse: &[f32]) -> Judged {
        let o: Vec<f32> = o.iter().map(|&x| bf16_to_f32(x)).collect();
        let o_err = (
            reference::compare(&o, &self.ref_o),
            reference::compare(&self.base_o, &self.ref_o),
        );
        let lse_err = (
            reference::compare(lse, &self.ref_lse),
            reference::compare(&self.base_lse, &self.ref_lse),
        );
        let rule = |ours: f64, base: f64| reference::check_rule(ours, base, reference::RULE_FLOOR);
        let checks = vec![
            ("o rel_err", rule(o_err.0.rel_err, o_err.1.rel_err)),
            ("o max_rel", rule(o_err.0.max_rel, o_err.1.max_rel)),
            ("lse rel_err", rule(lse_err.0.rel_err, lse_err.1.rel_err)),
            ("lse max_rel", rule(lse_err.0.max_rel, lse_err.1.max_rel)),
        ];
        (o_err, lse_err, checks)
    }
}

fn run_case(dev: &std::rc::Rc<Device>, stream: &Stream, c: &LseCase) -> Result<LseRow, CudaError> {
    let sh = c.shape;
    check_shape_kv(&sh, c.seq_kv)?;
    let seed = (sh.seq * 131 + c.seq_kv * 7 + sh.dim) as u64;
    let data = Checked::draw(&bwd_shape(c), c.causal, c.rounding, seed);
    let run = launch(dev, stream, c, c.rounding, data.inputs())?;
    let (o_err, lse_err, mut checks) = data.judge(&run.o, &run.lse);
    if c.rounding != Rounding::Rtne {
        // The same values rounded to nearest even: the outputs may differ only as the modes do.
        let rtne = launch(dev, stream, c, Rounding::Rtne, data.inputs())?;
        let ok = rounding_agrees(c.rounding, &run.o, &rtne.o);
        let verdict = Verdict {
            passed: ok,
            error: if ok { 0.0 } else { 1.0 },
            bound: 0.0,
            baseline: None,
        };
        checks.push(("rounding vs rtne", verdict));
    }
    let passed = checks.iter().all(|(_, v)| v.passed);
    let r = &run.report;
    Ok(LseRow {
        case: *c,
        kv_splits: run.kv_splits,
        kernel: run.entry.clone(),
        registers: r.registers,
        spills: run.spills,
        o: o_err,
        lse: lse_err,
        checks,
        passed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agreement test itself, on hand-made bit patterns: 1.0 = 0x3f80, its neighbours 0x3f7f
    /// (below) and 0x3f81 (above); -1.0 = 0xbf80.
    #[test]
    fn rounding_agreement_accepts_only_what_the_modes_do() {
        let rtne = vec![0x3f81u16, 0xbf81, 0x3f80, 0x3f80];
        assert!(rounding_agrees(
            Rounding::Rtz,
            &[0x3f80, 0xbf80, 0x3f80, 0x3f80],
            &rtne
        ));
        // Larger in magnitude, or two steps, or another sign: not a truncation.
        assert!(!rounding_agrees(
            Rounding::Rtz,
            &[0x3f82, 0xbf80, 0x3f80, 0x3f80],
            &rtne
        ));
        assert!(!rounding_agrees(
            Rounding::Rtz,
            &[0x3f7f, 0xbf80, 0x3f80, 0x3f80],
            &rtne
        ));
        assert!(!rounding_agrees(
            Rounding::Rtz,
            &[0xbf80, 0xbf80, 0x3f80, 0x3f80],
            &rtne
        ));
        // Identical outputs: RTZ must differ somewhere.
        assert!(!rounding_agrees(Rounding::Rtz, &rtne, &rtne));
        let many = vec![0x3f80u16; 100];
        let mut one_tie = many.clone();
        one_tie[7] = 0x3f81;
        assert!(rounding_agrees(Rounding::Rtna, &one_tie, &many));
        assert!(!rounding_agrees(Rounding::Rtna, &many, &one_tie));
    }
}
