//! Plain tile programs on sm_90a (`kittens_codegen::strip::lower_plain`): the `kittens_ir` crate's own
//! 16×16 example and tiled GEMMs whose register tiles have MFMA base shapes lower for Hopper (`mma.sync`
//! per warp), compile with NVRTC without spills, and what the lowering cannot do is refused by name.
//! python/tests/test_gpu_tile.py runs them on an H100/H200 against the interpreter.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
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
    let cache = test_cache("plain");
    for (k, op) in [
        (exp2_doc_example(), "ex2.approx"),
        (gemm_abt(4, 64, 32, Bf16), "mma.sync.aligned.m16n8k16"),
        (gemm_abt(1, 16, 64, Bf16), "mma.sync.aligned.m16n8k16"),
    ] {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx::count(&ptx::of(&l), op) > 0, "{}: no {op}", k.name);
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

/// SwiGLU whose bf16 result is normalised by its row sum (`o = silu(g)·u`, `out = o / Σ o`, one row
/// of `f` per wave), all tiles bf16 but the f32 `silu`: `o` is live across the row reduction, where a
/// register kept at 16 bits costs half.
fn swiglu_bf16_regs(f: u32) -> Kernel {
    let mut k = KernelBuilder::new(
        &format!("swiglu_bf16_regs_f{f}"),
        Schedule::Plain { waves: 4 },
    );
    let rows = k.param("rows");
    let x = k.global(
        "x",
        Bf16,
        &[("row", rows.clone()), ("col", Expr::c(2 * i64::from(f)))],
        Access::Read,
    );
    let out = k.global(
        "out",
        Bf16,
        &[("row", rows.clone()), ("col", Expr::c(i64::from(f)))],
        Access::Write,
    );
    k.grid(vec![rows.ceil_div(4)], GridOrder::RowMajor);
    let row = k.block(0) * 4 + k.wave();
    let g = k.tile("g", Bf16, 1, f, Layout::Row, BaseShape::STRIP);
    let u = k.tile("u", Bf16, 1, f, Layout::Row, BaseShape::STRIP);
    let t = k.tile("t", F32, 1, f, Layout::Row, BaseShape::STRIP);
    let o = k.tile("o", Bf16, 1, f, Layout::Row, BaseShape::STRIP);
    k.load_global(g, k.gview(x, vec![row.clone(), Expr::c(0)], 0, 1, 1, f));
    k.load_global(
        u,
        k.gview(x, vec![row.clone(), Expr::c(i64::from(f))], 0, 1, 1, f),
    );
    let sum = k.row_vec("sum", o, F32);
    k.silu(t, g);
    k.mul(o, t, u);
    k.row_sum(sum, o);
    k.div_row(o, o, sum);
    k.store(k.gview(out, vec![row, Expr::c(0)], 0, 1, 1, f), o);
    k.finish().unwrap()
}

/// bf16 registers at 16 bits (`ks::bf16_regs`) against the same kernel with every element a
/// `float`: fewer registers from NVRTC, no spills either way.
#[test]
fn bf16_registers_kept_at_16_bits_take_fewer_registers() {
    ensure_nvrtc();
    let cache = test_cache("bf16-regs");
    let k = swiglu_bf16_regs(1024);
    // Both forms with the IEEE logistic (`silu` as a division over `expf`), whose values live across
    // the slow path's branches: with the dialect's approximate one NVRTC schedules each element's
    // few instructions to the same register count either way (80 at f = 1024, 168 at 2048).
    let packed = kittens_codegen::strip::Dialect {
        logistic: None,
        ..kittens_codegen::strip::CUDA
    };
    let floats = kittens_codegen::strip::Dialect {
        bf16_regs: false,
        ..packed
    };
    let mut regs = vec![];
    for d in [packed, floats] {
        let l = kittens_codegen::strip::lower_plain(&k, d).unwrap_or_else(|e| panic!("{e}"));
        // Kept as text: the register type is the dialect's choice, which the PTX does not name.
        assert_eq!(l.source.contains("ks::bf16_regs<32> r0_g"), d.bf16_regs);
        let r = compile_clean(&l, &cache, &k.name);
        eprintln!(
            "{} (bf16_regs: {}): {} registers",
            k.name, d.bf16_regs, r.registers
        );
        regs.push(r.registers);
    }
    assert!(regs[0] < regs[1], "16-bit {} vs f32 {}", regs[0], regs[1]);
}
