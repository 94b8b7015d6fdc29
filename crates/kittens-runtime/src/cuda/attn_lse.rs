//! Checks of the attention forward's log-sum-exp output, query and key lengths that differ and the
//! bottom-right causal mask on the GPU: each case lowered for sm_90a (`AttnConfig::for_gpu` with
//! `lse`, `bottom_right`), launched on random bf16 inputs with logits to ±64, and O and the log-sum-exp
//! each judged over every element by the test rule against the f64 forward, the PyTorch-style bf16
//! forward being the baseline (`kittens_kernels::reference_fwd`), as the CPU runner judges them.
//! `kittens bench attn_fwd --checks lse` runs them (short shapes: also the sanitizers' case).

use kittens_kernels::attn_bwd::{BwdShape, Causal};
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::reference::{self, ErrorReport, Verdict};
use kittens_kernels::reference_fwd;
use serde::Serialize;

use super::args::PackedArgs;
use super::attn::{check_shape_kv, params_kv};
use super::bench_check::{bf16_to_f32, f32_to_bf16, random_bf16};
use super::driver::{Device, DeviceBuffer, Stream, TensorMap};
use super::{compile, CudaError};
use kittens_kernels::reference::AttnShape;

fn invalid(e: impl std::fmt::Display) -> CudaError {
    CudaError::Invalid(e.to_string())
}

/// One case: `shape.seq` queries against `seq_kv` keys.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LseCase {
    pub shape: AttnShape,
    pub seq_kv: usize,
    pub causal: Causal,
}

/// What one case found: each output's error and its baseline's, and the rule's verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct LseRow {
    pub case: LseCase,
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

fn run_case(dev: &std::rc::Rc<Device>, stream: &Stream, c: &LseCase) -> Result<LseRow, CudaError> {
    let sh = c.shape;
    check_shape_kv(&sh, c.seq_kv)?;
    let h100 = kittens_hw::gpu("h100").map_err(invalid)?;
    let cfg = AttnConfig {
        dim: sh.dim as u32,
        causal: c.causal != Causal::No,
        bottom_right: c.causal == Causal::BottomRight,
        layout: sh.layout,
        lse: true,
        ..AttnConfig::for_gpu(h100)
    };
    let k = kittens_kernels::attn_fwd::build(&cfg).map_err(invalid)?;
    let l = kittens_codegen::lower(&k, kittens_hw::Target::Sm90a).map_err(invalid)?;
    let shared = l.dynamic_shared_bytes();
    let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
    let function = dev.load_module(&image.cubin)?.function(&l.entry, shared)?;

    let bsh = BwdShape {
        batch: sh.batch,
        heads: sh.heads,
        heads_kv: sh.heads_kv,
        seq_q: sh.seq,
        seq_kv: c.seq_kv,
        dim: sh.dim,
        layout: sh.layout,
    };
    let seed = (sh.seq * 131 + c.seq_kv * 7 + sh.dim) as u64;
    // Inputs times 8 (exact in bf16): logits to about ±64 at head dimension 64.
    let draw = |len, seed| -> Vec<u16> {
        random_bf16(len, seed)
            .into_iter()
            .map(|x| f32_to_bf16(bf16_to_f32(x) * 8.0))
            .collect()
    };
    let (hq, hk, hv) = (
        draw(bsh.q_len(), seed),
        draw(bsh.kv_len(), seed + 1),
        draw(bsh.kv_len(), seed + 2),
    );
    let upload = |h: &[u16]| -> Result<DeviceBuffer, CudaError> {
        let mut b = dev.alloc(h.len() * 2)?;
        b.upload(h)?;
        Ok(b)
    };
    let (q, kb, vb) = (upload(&hq)?, upload(&hk)?, upload(&hv)?);
    let mut o = dev.alloc(bsh.q_len() * 2)?;
    o.fill_u16(0x7fc0)?; // NaN: an element the kernel does not write fails the check
    let mut lse = dev.alloc(bsh.lse_len() * 4)?;
    lse.upload(&vec![f32::NAN; bsh.lse_len()])?;
    let by_name = |name: &str| -> Result<&DeviceBuffer, CudaError> {
        match name {
            "q" => Ok(&q),
            "k" => Ok(&kb),
            "v" => Ok(&vb),
            "o" => Ok(&o),
            "lse" => Ok(&lse),
            _ => Err(invalid(format!("unknown tensor `{name}`"))),
        }
    };
    let values = params_kv(&sh, c.seq_kv);
    let mut args = PackedArgs::pack(
        &l,
        &values,
        |g| {
            let buf = by_name(&g.tensor)?;
            Ok(TensorMap::bf16_nd(buf, &g.dims, &g.strides, &g.boxes, g.swizzle)?.map)
        },
        |name| Ok(by_name(name)?.ptr()),
    )?;
    let mut pointers = args.pointers();
    let grid = l
        .blocks(&values, dev.multiprocessors)
        .ok_or_else(|| invalid("grid extents of the lowered kernel"))?;
    // SAFETY: one pointer per kernel argument in the lowering's order and types (`PackedArgs`); the
    // buffers hold the case's tensors and the maps were built over them; `args` outlives the launch.
    unsafe { function.launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut pointers)? };
    stream.synchronize()?;
    let mut out_o = vec![0u16; bsh.q_len()];
    o.download(&mut out_o)?;
    let mut out_lse = vec![0f32; bsh.lse_len()];
    lse.download(&mut out_lse)?;

    let f = |h: &[u16]| h.iter().map(|&x| bf16_to_f32(x)).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&hq), f(&hk), f(&hv));
    let (ref_o, ref_lse, _) = reference_fwd::forward(&qf, &kf, &vf, &bsh, c.causal);
    let (base_o, base_lse) = reference_fwd::forward_bf16_baseline(&qf, &kf, &vf, &bsh, c.causal);
    let o_err = (
        reference::compare(&f(&out_o), &ref_o),
        reference::compare(&base_o, &ref_o),
    );
    let lse_err = (
        reference::compare(&out_lse, &ref_lse),
        reference::compare(&base_lse, &ref_lse),
    );
    let rule = |ours: f64, base: f64| reference::check_rule(ours, base, reference::RULE_FLOOR);
    let checks = vec![
        ("o rel_err", rule(o_err.0.rel_err, o_err.1.rel_err)),
        ("o max_rel", rule(o_err.0.max_rel, o_err.1.max_rel)),
        ("lse rel_err", rule(lse_err.0.rel_err, lse_err.1.rel_err)),
        ("lse max_rel", rule(lse_err.0.max_rel, lse_err.1.max_rel)),
    ];
    let passed = checks.iter().all(|(_, v)| v.passed);
    let r = &image.report;
    Ok(LseRow {
        case: *c,
        kernel: l.entry.clone(),
        registers: r.registers,
        spills: r.spill_stores + r.spill_loads,
        o: o_err,
        lse: lse_err,
        checks,
        passed,
    })
}
