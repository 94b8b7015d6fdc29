//! Plain tile programs on sm_90a (`kittens_codegen::strip::lower_plain`): the `kittens_ir` crate's own
//! 16×16 example and tiled GEMMs whose register tiles have MFMA base shapes lower for Hopper (`mma.sync`
//! per warp), compile with NVRTC without spills, and what the lowering cannot do is refused by name.
//! python/tests/test_gpu_tile.py runs them on an H100/H200 against the interpreter.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::{compile_clean, ensure_nvrtc, fresh_cache};
use kittens_hw::dtype::DType::{self, Bf16, F16, F32};
use kittens_hw::Target;
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, MmaForm, MmaOperand, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

/// The crate documentation's example: `y = exp2(x)` over one 16×16 f32 tile, one wave.
fn exp2_doc_example() -> Kernel {
    let mut k = KernelBuilder::new("exp2", Schedule::Plain { waves: 1 });
    let n = k.param("n");
    let x = k.global(
        "x",
        F32,
        &[("r", n.clone()), ("c", n.clone())],
        Access::Read,
    );
    let y = k.global("y", F32, &[("r", n.clone()), ("c", n)], Access::Write);
    let t = k.tile("t", F32, 16, 16, Layout::Row, BaseShape::S16X16);
    k.load_global(t, k.gtile(x, 16, 16, 0, 0));
    k.exp2(t, t);
    k.store(k.gtile(y, 16, 16, 0, 0), t);
    k.finish().unwrap()
}

/// `c = a·bᵀ` (`b` stored `n × k`), `waves` waves per block, each wave a 16-row band of the
/// block's `16·waves × bn` tile of `c`; A through registers, B read by the `mma` from shared memory
/// (a shared operand), K in steps of `bk`; the operands in `ad` (bf16 or, refused, f16).
fn gemm_abt(waves: u32, bn: u32, bk: u32, ad: DType) -> Kernel {
    let bm = 16 * waves;
    let mut k = KernelBuilder::new("plain_gemm_abt", Schedule::Plain { waves });
    let (m, n, kk) = (k.param("m"), k.param("n"), k.param("k"));
    let a = k.global(
        "a",
        Bf16,
        &[("m", m.clone()), ("k", kk.clone())],
        Access::Read,
    );
    let b = k.global(
        "b",
        ad,
        &[("n", n.clone()), ("k", kk.clone())],
        Access::Read,
    );
    let c = k.global(
        "c",
        Bf16,
        &[("m", m.clone()), ("n", n.clone())],
        Access::Write,
    );
    k.grid(
        vec![m.ceil_div(i64::from(bm)), n.ceil_div(i64::from(bn))],
        GridOrder::RowMajor,
    );
    let row = k.block(0) * i64::from(bm) + k.wave() * 16;
    let col = k.block(1) * i64::from(bn);
    let sb = k.shared("sb", ad, bn, bk, Swizzle::None, 1);
    let at = k.tile("a", ad, 16, bk, Layout::Row, BaseShape::S16X32);
    let acc = k.tile("acc", F32, 16, bn, Layout::Col, BaseShape::S16X16);
    let out = k.tile("out", Bf16, 16, bn, Layout::Col, BaseShape::S16X16);
    k.zero(acc);
    k.for_range("s", 0, kk.ceil_div(i64::from(bk)), |k, s| {
        let s = s * i64::from(bk);
        k.load_async(
            k.smem(sb, 0),
            k.gview(b, vec![col.clone(), s.clone()], 0, 1, bn, bk),
        );
        k.load_global(at, k.gview(a, vec![row.clone(), s], 0, 1, 16, bk));
        k.wait_async(0);
        k.barrier();
        k.mma(
            MmaForm::Abt,
            acc,
            MmaOperand::Reg(at),
            MmaOperand::Shared(k.smem(sb, 0)),
            Some(acc),
        );
        k.barrier();
    });
    k.copy(out, acc);
    k.store(k.gview(c, vec![row, col], 0, 1, 16, bn), out);
    k.finish().unwrap()
}

#[test]
fn plain_programs_compile_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = fresh_cache("plain");
    for (k, needle) in [
        (exp2_doc_example(), "exp2f("),
        (gemm_abt(4, 64, 32, Bf16), "mma.sync.aligned.m16n8k16"),
        (gemm_abt(1, 16, 64, Bf16), "mma.sync.aligned.m16n8k16"),
    ] {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        assert!(l.source.contains(needle), "{}: no {needle}", k.name);
        assert_eq!(l.threads, 32 * k.waves);
        let r = compile_clean(&l, &cache, &k.name);
        eprintln!("{} ({} waves): {r:?}", k.name, k.waves);
        assert!(r.registers > 0 && r.registers <= 255);
    }
}

#[test]
fn what_mma_sync_cannot_take_is_refused_by_name() {
    // f16 operands (an AMD MFMA input): the plain sm_90a lowering multiplies bf16.
    let e = kittens_codegen::lower(&gemm_abt(1, 16, 32, F16), Target::Sm90a).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("register `a` of F16") && s.contains("(f32 or bf16)"),
        "{s}"
    );
    // N = 8·k is fine, K of 8 is not a whole k16 step.
    let mut k = KernelBuilder::new("k8", Schedule::Plain { waves: 1 });
    let a = k.tile("a", Bf16, 16, 8, Layout::Row, BaseShape::STRIP);
    let b = k.tile("b", Bf16, 8, 16, Layout::Col, BaseShape::STRIP);
    let d = k.tile("d", F32, 16, 16, Layout::Row, BaseShape::STRIP);
    let g = k.global(
        "g",
        F32,
        &[("r", Expr::c(16)), ("c", Expr::c(16))],
        Access::Write,
    );
    k.zero(a);
    k.zero(b);
    k.mma(MmaForm::Ab, d, MmaOperand::Reg(a), MmaOperand::Reg(b), None);
    k.store(k.gtile(g, 16, 16, 0, 0), d);
    let e = kittens_codegen::lower(&k.finish().unwrap(), Target::Sm90a).unwrap_err();
    assert!(
        e.to_string().contains("16×16×8 into `d`") && e.to_string().contains("K of 16"),
        "{e}"
    );
}
