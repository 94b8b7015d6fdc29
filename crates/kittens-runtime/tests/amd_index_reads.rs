//! Index reads on the CDNA targets (`kittens_ir::Expr::Elem` and per-block `Clip`s, docs/ir.md): the
//! varlen attention forward (`cu_seqlens` read on the device, the packed tensors clipped at each
//! sequence's end) and the paged decode (`block_table` and `cache_seqlens` read per key step), built
//! the way a run builds them: compiled for gfx942 and gfx950 with no spills and no scratch, and their
//! code objects run on the ISA emulator against the f64 references by the test rule — a packed batch
//! with an empty sequence, a one-row one and lengths that are not multiples of the 32-row blocks, GQA,
//! causal bottom-right and not; pages of 32 keys under lengths that are no multiple of them,
//! three queries per sequence, split-KV in two parts with the merge; and the varlen backward (its key
//! blocks for dK and dV, then its query blocks for dQ, each reading the lse into a register vector
//! from the row `cu_seqlens_q` starts its sequence at) on a smaller batch with an empty sequence, at
//! head dims 64 and 128, also with a soft cap and a sliding window.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::clang_for;
use kittens_hw::Target;
use kittens_ir::Kernel;
use kittens_kernels::problem::NamedArgs;
use kittens_runtime::amd::analyze;
use kittens_runtime::runner::{run, IsaEmu};

fn varlen(causal: bool) -> NamedArgs {
    // The runner draws the lengths: the longest, 1, 0, then random ones (here 150/133, 1, 0, ...).
    NamedArgs::new()
        .with("batch", 5)
        .with("heads", 4)
        .with("heads_kv", 2)
        .with("seq", 150)
        .with("seq_kv", 133)
        .with("dim", 64)
        .with("causal", causal)
        .with("input_scale", 4.0)
        .with("seed", 36)
}

fn varlen_bwd(causal: bool, dim: usize) -> NamedArgs {
    // Lengths drawn as the forward's (the longest, 1, 0, then random ones), smaller: the ISA
    // emulator runs both launches of the backward.
    NamedArgs::new()
        .with("batch", 4)
        .with("heads", 4)
        .with("heads_kv", 2)
        .with("seq", 71)
        .with("seq_kv", 45)
        .with("dim", dim)
        .with("causal", causal)
        .with("input_scale", 4.0)
        .with("seed", 38)
}

fn paged(causal: bool, splits: usize, seq: usize) -> NamedArgs {
    // Pages of 32 keys, 3 per sequence: lengths drawn up to 96, 70 the longest; 3 queries per
    // sequence (bottom-right causal masks differ per query), or 1 (decoding: GQA packed).
    NamedArgs::new()
        .with("batch", 3)
        .with("heads", 4)
        .with("heads_kv", 2)
        .with("seq", seq)
        .with("num_splits", splits)
        .with("seq_kv", 70)
        .with("page_size", 32)
        .with("dim", 64)
        .with("causal", causal)
        .with("input_scale", 4.0)
        .with("seed", 37)
}

/// The kernels and targets this file covers (attn_paged's 16-key P·V runs the 16×16×16 bf16 MFMA on
/// both targets: CDNA4 keeps CDNA3's).
fn cases() -> Vec<(&'static str, Target, NamedArgs)> {
    let mut v = Vec::new();
    for t in [Target::Gfx942, Target::Gfx950] {
        for causal in [false, true] {
            v.push(("attn_varlen", t, varlen(causal)));
            for dim in [64, 128] {
                v.push(("attn_varlen_bwd", t, varlen_bwd(causal, dim)));
            }
        }
        // A soft cap (one more score tile: the cap's derivative) and a window cutting inside the
        // 16- and 32-row blocks on both sides.
        for dim in [64, 128] {
            let a = varlen_bwd(true, dim)
                .with("softcap", 5.0)
                .with("window", "20,3");
            v.push(("attn_varlen_bwd", t, a));
        }
    }
    for t in [Target::Gfx942, Target::Gfx950] {
        for (causal, splits, seq) in [(false, 1, 3), (true, 1, 3), (true, 2, 3), (true, 2, 1)] {
            v.push(("attn_paged", t, paged(causal, splits, seq)));
        }
    }
    v
}

#[test]
fn index_reading_kernels_compile_without_spills() {
    for (kernel, t, a) in cases() {
        let arch = t.arch().unwrap();
        let entry = kittens_kernels::by_name(kernel).unwrap();
        let p = entry.problem(&a).unwrap();
        // Every launch of the run (the backward's key blocks and query blocks, a split's merge).
        let stages = p.stages(t, &p.plan(t).unwrap()).unwrap();
        let mut reads = false;
        for k in stages.into_iter().map(|s| s.kernel) {
            reads |= compiles_without_spills(kernel, t, arch, &k);
        }
        // The index tensors are read through their pointers (scalar loads of uniform indices).
        assert!(reads, "{kernel} {t}: no index read in the source");
    }
}

/// Compiles `k` for `t` and checks it spills nothing and fits the register budget; true when its
/// source reads an index tensor.
fn compiles_without_spills(kernel: &str, t: Target, arch: kittens_hw::Arch, k: &Kernel) -> bool {
    let kernel = format!("{kernel} ({})", k.name);
    let l = kittens_codegen::lower(k, t).unwrap_or_else(|e| panic!("{kernel} {t}: {e}"));
    let out = clang_for(arch)
        .compile(&l.source, arch)
        .unwrap_or_else(|e| panic!("{kernel} {t}: {e}"));
    let r = analyze(&out.asm, arch, Some(&l.entry)).unwrap();
    eprintln!(
        "{kernel} {t}: {} VGPR + {} AGPR, {} SGPR, spills {}/{}, scratch {}",
        r.vgpr, r.agpr, r.sgpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes
    );
    assert_eq!(
        (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
        (0, 0, 0),
        "{kernel} {t}"
    );
    assert!(r.within_budget(), "{kernel} {t}: {r:?}");
    l.source.contains("((const int*)g_cu_seqlens_q)")
        || l.source.contains("((const int*)g_block_table)")
}

#[test]
fn index_reading_kernels_on_the_isa_emulator() {
    for (kernel, t, a) in cases() {
        clang_for(t.arch().unwrap());
        let emu = IsaEmu::new(t).unwrap();
        let entry = kittens_kernels::by_name(kernel).unwrap();
        let p = entry.problem(&a).unwrap();
        let r = run(entry, p.as_ref(), &emu).unwrap_or_else(|e| panic!("{kernel} {t}: {e}"));
        for o in &r.outputs {
            eprintln!(
                "{kernel} {t}: {} rel_err {:.3e} (bf16 {:.3e})",
                o.name,
                o.error.rel_err,
                o.baseline.as_ref().map_or(f64::NAN, |b| b.rel_err)
            );
        }
        assert!(r.passed, "{kernel} {t}: {:?}", r.failures());
    }
}
