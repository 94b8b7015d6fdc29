//! Build-time validation: typed errors that point at the op, and the per-target budgets.

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::*;
use kittens_tile::{BaseShape, Layout, Swizzle, TileError};

/// A one-wave kernel with a 2-d bf16 input `x` of `rows × cols`.
fn one_wave(rows: i64, cols: i64) -> (KernelBuilder, GlobalId) {
    let mut k = KernelBuilder::new("t", Schedule::Plain { waves: 1 });
    let x = k.global(
        "x",
        Bf16,
        &[("r", Expr::c(rows)), ("c", Expr::c(cols))],
        Access::Read,
    );
    (k, x)
}

fn op_error(r: Result<Kernel, BuildError>) -> (usize, String, OpError) {
    match r {
        Err(BuildError::Op { index, desc, error }) => (index, desc, error),
        other => panic!("expected an op error, got {other:?}"),
    }
}

#[test]
fn mma_with_wrong_b_layout_names_the_op() {
    let (mut k, _) = one_wave(16, 16);
    let a = k.tile("a", Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    let b = k.tile("b", Bf16, 16, 32, Layout::Col, BaseShape::S16X32);
    let c = k.tile("c", F32, 16, 16, Layout::Col, BaseShape::S16X16);
    k.zero(c);
    k.mma_abt(c, a, b, c);
    let (index, desc, e) = op_error(k.finish());
    assert_eq!((index, desc.as_str()), (1, "mma_abt"));
    assert!(
        matches!(
            e,
            OpError::Layout {
                operand: "B",
                expected: Layout::Row,
                found: Layout::Col,
                ..
            }
        ),
        "{e}"
    );
    let msg = BuildError::Op {
        index,
        desc,
        error: e,
    }
    .to_string();
    assert!(
        msg.starts_with("op #1 (mma_abt): B must be in Row layout"),
        "{msg}"
    );
}

#[test]
fn mma_shape_mismatch() {
    let (mut k, _) = one_wave(16, 16);
    let a = k.tile("a", Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    let b = k.tile("b", Bf16, 16, 64, Layout::Row, BaseShape::S16X32);
    let c = k.tile("c", F32, 16, 16, Layout::Col, BaseShape::S16X16);
    k.mma_abt(c, a, b, c);
    let (_, _, e) = op_error(k.finish());
    assert!(
        matches!(
            e,
            OpError::Shape {
                rows: 16,
                cols: 32,
                found_rows: 16,
                found_cols: 64,
                ..
            }
        ),
        "{e}"
    );
}

/// HipKittens D.1's counter-example: a 16×32 shared tile cannot fill a 32×16 register tile.
#[test]
fn shared_16x32_into_register_32x16_is_refused() {
    let (mut k, _) = one_wave(16, 16);
    let s = k.shared("s", Bf16, 16, 32, Swizzle::None, 1);
    let r = k.tile("r", Bf16, 32, 16, Layout::Row, BaseShape::S32X16);
    k.load(r, k.smem(s, 0));
    let (index, _, e) = op_error(k.finish());
    assert_eq!(index, 0);
    assert!(
        matches!(
            e,
            OpError::Tile(TileError::IncompatibleShapes {
                shared_rows: 16,
                reg_rows: 32,
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn sub_tile_must_match_register_shape() {
    let (mut k, x) = one_wave(64, 64);
    let s = k.shared("s", Bf16, 64, 64, Swizzle::None, 2);
    let r = k.tile("r", Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    k.load_async(k.smem(s, 1), k.gtile(x, 64, 64, 0, 0));
    k.load(r, k.smem(s, 0).sub(16, 64, 1, 0));
    let (index, _, e) = op_error(k.finish());
    assert_eq!(index, 1);
    assert!(
        matches!(
            e,
            OpError::Shape {
                rows: 16,
                cols: 32,
                found_cols: 64,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn async_load_cannot_convert_and_ring_index_is_checked() {
    let (mut k, x) = one_wave(64, 64);
    let s = k.shared("s", F32, 64, 64, Swizzle::None, 2);
    k.load_async(k.smem(s, 0), k.gtile(x, 64, 64, 0, 0));
    assert!(matches!(
        op_error(k.finish()).2,
        OpError::DType {
            expected: F32,
            found: Bf16,
            ..
        }
    ));
    let (mut k, x) = one_wave(64, 64);
    let s = k.shared("s", Bf16, 64, 64, Swizzle::None, 2);
    k.load_async(k.smem(s, 2), k.gtile(x, 64, 64, 0, 0));
    assert!(matches!(
        op_error(k.finish()).2,
        OpError::Invalid {
            what: "shared view",
            ..
        }
    ));
}

#[test]
fn declaration_errors_name_the_tile() {
    let (mut k, _) = one_wave(16, 16);
    k.tile("bad", Bf16, 24, 32, Layout::Row, BaseShape::S16X32);
    match k.finish() {
        Err(BuildError::Decl {
            name,
            error: TileError::NotMultipleOfBase { rows: 24, .. },
        }) => assert_eq!(name, "bad"),
        other => panic!("{other:?}"),
    }
}

/// Per-target budgets: a kernel with `bytes` of shared memory and one 64×64 f32 accumulator per wave.
fn budget_kernel(shared_rows: u32, waves: u32, mma_from_shared: bool) -> Kernel {
    let mut k = KernelBuilder::new("budget", Schedule::Plain { waves });
    let s = k.shared("s", Bf16, shared_rows, 64, Swizzle::None, 1);
    let a = k.tile("a", Bf16, 64, 64, Layout::Row, BaseShape::S16X32);
    let c = k.tile("c", F32, 64, 64, Layout::Col, BaseShape::S16X16);
    let b = if mma_from_shared {
        MmaOperand::Shared(k.smem(s, 0).sub(64, 64, 0, 0))
    } else {
        MmaOperand::Reg(a)
    };
    k.mma(MmaForm::Abt, c, MmaOperand::Reg(a), b, None);
    k.finish().unwrap()
}

#[test]
fn shared_budget_per_target() {
    let mi300x = kittens_hw::gpu("mi300x").unwrap();
    let mi355x = kittens_hw::gpu("mi355x").unwrap();
    // 512 rows × 64 bf16 = 64 KiB fits MI300X exactly; 1024 rows (128 KiB) needs CDNA4's 160 KiB.
    assert_eq!(
        check_target(&budget_kernel(512, 4, false), mi300x)
            .unwrap()
            .shared_bytes,
        64 * 1024
    );
    let e = check_target(&budget_kernel(1024, 4, false), mi300x).unwrap_err();
    assert!(
        matches!(
            e,
            BuildError::SharedBudget {
                need: 131072,
                have: 65536,
                ..
            }
        ),
        "{e}"
    );
    assert!(check_target(&budget_kernel(1024, 4, false), mi355x).is_ok());
}

#[test]
fn register_estimate_per_wave() {
    let mi355x = kittens_hw::gpu("mi355x").unwrap();
    // 64×64 bf16 on 64 lanes: 64 values = 32 registers; 64×64 f32: 64 registers; plus 16.
    let k = budget_kernel(64, 8, false);
    assert_eq!(validate::reg_estimate(&k, 64), 32 + 64 + 16);
    let r = check_target(&k, mi355x).unwrap();
    assert_eq!(
        (r.regs_per_wave, r.reg_budget),
        (112, 256),
        "8 waves = 2 per SIMD share 512"
    );
    // On a 32-lane warp the same tiles need twice the registers per lane.
    assert_eq!(validate::reg_estimate(&k, 32), 64 + 128 + 16);
}

#[test]
fn shared_mma_operand_only_on_hopper() {
    let k = budget_kernel(64, 4, true);
    let e = check_target(&k, kittens_hw::gpu("mi355x").unwrap()).unwrap_err();
    assert!(
        matches!(
            e,
            BuildError::Op {
                error: OpError::SharedOperand { target: "gfx950" },
                ..
            }
        ),
        "{e}"
    );
    assert!(check_target(&k, kittens_hw::gpu("h100").unwrap()).is_ok());
}

#[test]
fn ping_pong_expansion_inserts_stagger_priorities_and_barriers() {
    let mut k = KernelBuilder::new("pp", Schedule::PingPong8);
    let c = k.tile("c", F32, 16, 16, Layout::Col, BaseShape::S16X16);
    k.staggered(|k| {
        k.for_range("i", 0, 4, |k, _| {
            k.memory("m", |k| k.fence());
            k.compute("c", |k| k.zero(c));
        })
    });
    let k = k.finish().unwrap();
    let implied: Vec<String> = k
        .ops()
        .iter()
        .filter(|r| r.implied)
        .map(|r| r.op.name())
        .collect();
    let want = [
        "barrier(Block)",
        "hint(Fence)",
        "barrier(Block)",
        "hint(Fence)",
        "priority(1)",
        "priority(0)",
        "hint(Fence)",
        "barrier(Block)",
        "hint(Fence)",
        "barrier(Block)",
    ];
    assert_eq!(implied, want);
    // The first barrier is the stagger: only the second warpgroup executes it.
    match &k.body[0] {
        Stmt::If { cond, then, els } => {
            assert!(cond.is_wave_uniform() && els.is_empty() && then.len() == 1);
            let env = |w| Env {
                params: &[],
                vars: &[],
                block: &[],
                wave: w,
            };
            assert_eq!(
                (0..8)
                    .filter(|&w| cond.eval(&env(w)) == Some(true))
                    .collect::<Vec<_>>(),
                vec![4, 5, 6, 7]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn launch_size_and_shared_layout() {
    let mut k = KernelBuilder::new("l", Schedule::Plain { waves: 4 });
    let m = k.param("m");
    k.grid(vec![m.ceil_div(64), Expr::c(3)], GridOrder::RowMajor);
    k.shared("a", Bf16, 16, 16, Swizzle::None, 3); // 1536 bytes
    k.shared("b", F32, 8, 8, Swizzle::None, 1); // 256 bytes
    let k = k.finish().unwrap();
    assert_eq!(k.blocks(&[130]), Some(9));
    assert_eq!(k.shared_offsets(1024), (vec![0, 2048], 2304));
    assert_eq!(k.shared_offsets(1), (vec![0, 1536], 1792));
    assert_eq!(k.shared_bytes(), 1792);
}

/// HipKittens D.3's pinned tile: 16×128 bf16 in v[24..=39]; a second tile over v[36..] overlaps it.
#[test]
fn pinned_tiles_are_checked() {
    use kittens_tile::{RegFile, RegTile};
    let pin = |first, last| {
        RegTile::new(Bf16, 16, 128, Layout::Row, BaseShape::S16X32)
            .and_then(|t| t.pinned(RegFile::Vgpr, first, last, 64))
    };
    let mut k = KernelBuilder::new("pins", Schedule::Plain { waves: 4 });
    k.reg_tile("a", pin(24, 39));
    k.reg_tile("b", pin(40, 55));
    let ok = k.finish().unwrap();
    assert!(check_target(&ok, kittens_hw::gpu("mi355x").unwrap()).is_ok());
    let e = check_target(&ok, kittens_hw::gpu("h100").unwrap()).unwrap_err();
    assert!(matches!(e, BuildError::PinTarget { .. }), "{e}");

    let mut k = KernelBuilder::new("pins", Schedule::Plain { waves: 4 });
    k.reg_tile("a", pin(24, 39));
    k.reg_tile("b", pin(36, 51));
    match k.finish() {
        Err(BuildError::PinOverlap {
            a,
            b,
            first: 36,
            last: 39,
            ..
        }) => assert_eq!((a.as_str(), b.as_str()), ("a", "b")),
        other => panic!("{other:?}"),
    }

    let mut k = KernelBuilder::new("pins", Schedule::Plain { waves: 4 });
    k.reg_tile("high", pin(250, 265));
    let e = check_target(&k.finish().unwrap(), kittens_hw::gpu("mi300x").unwrap()).unwrap_err();
    assert!(e.to_string().contains("256 vgprs per lane"), "{e}");
}

/// The estimate is a peak over live ranges: tiles used at disjoint points share registers; a tile
/// whose value crosses a loop's back edge (read before it is written in the loop) is live through the
/// loop, one written afresh at the top of every iteration only from that write to its last use.
#[test]
fn register_estimate_follows_liveness() {
    let mut k = KernelBuilder::new("live", Schedule::Plain { waves: 4 });
    let x = k.global(
        "x",
        F32,
        &[("r", Expr::c(64)), ("c", Expr::c(64))],
        Access::Read,
    );
    let [a, b, c, d] =
        ["a", "b", "c", "d"].map(|n| k.tile(n, F32, 64, 64, Layout::Row, BaseShape::S16X16));
    k.load_global(a, k.gtile(x, 64, 64, 0, 0)); // 0: a live 0..2
    k.add(a, a, 1.0); // 1
    k.load_global(b, k.gtile(x, 64, 64, 0, 0)); // 2: b live 2..3
    k.zero(d); // 3
    k.for_range("i", 0, 4, |k, _| {
        k.zero(c); // 4: c written afresh every iteration: live 4..5
        k.fence(); // 5
        k.add(d, d, 1.0); // 6: d read before written, carried: live through the loop, 3..8
        k.fence(); // 7
    });
    let k = k.finish().unwrap();
    // 64×64 f32 on 64 lanes is 64 registers; at most c and d live at once.
    assert_eq!(validate::reg_estimate(&k, 64), 2 * 64 + 16);
    let ranges = regs::live_ranges(&k);
    assert_eq!(
        ranges,
        vec![Some((0, 2)), Some((2, 3)), Some((4, 5)), Some((3, 8))]
    );
    let peak = validate::reg_peak(&k, 64);
    assert_eq!(peak.op, Some(4));
    assert_eq!(peak.costliest(4), "`c` (64), `d` (64)");
}

/// The other schedules: 4-wave interleave ends clusters in fences only; producer/consumer turns roles into
/// a warpgroup conditional with register reallocation; roles outside that schedule are refused.
#[test]
fn interleave_and_producer_consumer_expansion() {
    let body = |k: &mut KernelBuilder| {
        k.memory("m", |k| k.wait_async(0));
        k.compute("c", |k| k.prio(2));
    };
    let mut k = KernelBuilder::new("i4", Schedule::Interleave4);
    body(&mut k);
    let k = k.finish().unwrap();
    let names: Vec<String> = k.ops().iter().map(|r| r.op.name()).collect();
    assert_eq!(
        names,
        [
            "wait(Async, Outstanding(0))",
            "hint(Fence)",
            "priority(2)",
            "hint(Fence)"
        ]
    );

    let pc = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 40,
        consumer_regs: 232,
    };
    let mut k = KernelBuilder::new("pc", pc);
    k.roles(|k| k.barrier(), |k| k.barrier());
    let k = k.finish().unwrap();
    assert_eq!(k.waves, 12);
    match &k.body[..] {
        [Stmt::If { cond, then, els }] => {
            let env = |w| Env {
                params: &[],
                vars: &[],
                block: &[],
                wave: w,
            };
            assert_eq!(
                (0..12)
                    .filter(|&w| cond.eval(&env(w)) == Some(true))
                    .count(),
                4
            );
            assert_eq!(
                then[0],
                Stmt::Op {
                    op: Op::SetMaxRegs { regs: 40 },
                    implied: true
                }
            );
            assert_eq!(
                els[0],
                Stmt::Op {
                    op: Op::SetMaxRegs { regs: 232 },
                    implied: true
                }
            );
        }
        other => panic!("{other:?}"),
    }

    let mut k = KernelBuilder::new("bad", Schedule::PingPong8);
    k.roles(|k| k.barrier(), |k| k.barrier());
    assert!(matches!(k.finish(), Err(BuildError::Structure(_))));
}
