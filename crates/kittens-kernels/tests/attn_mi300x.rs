//! MI300X-attn's kernel as a configuration of the attention (`attn_fwd`'s `seed001` variant on
//! gfx942): the program has the paper's structure, the schedule check finds it clean (and refuses
//! it without the wait that lands the next K block), and the bank solver makes every LDS read of
//! the hot loop conflict-free.

use kittens_hw::{Arch, Target};
use kittens_ir::analysis::verify;
use kittens_ir::{Kernel, Op, Schedule, Scope, Stmt, WaitQueue};
use kittens_kernels::attn_fwd::{self, AttnConfig, AttnSchedule};

fn seed001() -> Kernel {
    kittens_kernels::by_name("attn_fwd")
        .unwrap()
        .build_variant(Target::Gfx942, Some("seed001"))
        .unwrap()
}

/// The async loads of K inside a wave conditional (`if wave / 4 == 0`), with their scope.
fn conditional_loads(body: &[Stmt], inside: bool, out: &mut Vec<Scope>) {
    for s in body {
        match s {
            Stmt::Op {
                op: Op::LoadAsync { scope, .. },
                ..
            } if inside => out.push(*scope),
            Stmt::If { then, els, .. } => {
                conditional_loads(then, true, out);
                conditional_loads(els, true, out);
            }
            Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                conditional_loads(body, inside, out)
            }
            _ => {}
        }
    }
}

#[test]
fn seed001_has_the_papers_structure() {
    let k = seed001();
    assert_eq!(
        (k.name.as_str(), k.schedule, k.waves),
        ("attn_fwd_mi300x", Schedule::PingPong8, 8)
    );
    // §4.1: K double buffered in 32 KiB (64 keys × 128 × bf16 × 2), the third Q tile of every
    // wave in the other 32 KiB; V has no LDS buffer.
    let shared: Vec<(&str, u32, u32, u32)> = k
        .shared
        .iter()
        .map(|s| (s.name.as_str(), s.tile.rows, s.tile.cols, s.count))
        .collect();
    assert_eq!(shared, vec![("k_s", 64, 128, 2), ("q_s", 128, 128, 1)]);
    assert_eq!(k.shared_bytes(), 65536);
    // §4.3: V reaches registers from global memory, 32 head-dimension columns at a time.
    let v = k.globals.iter().position(|g| g.name == "v").unwrap() as u32;
    let v_loads = k
        .ops()
        .into_iter()
        .filter(|r| matches!(&r.op, Op::LoadGlobal { src, .. } if src.tensor.0 == v))
        .count();
    assert_eq!(v_loads, 2 * 128 / 32, "in the loop and after it, per chunk");
    assert!(!k
        .ops()
        .into_iter()
        .any(|r| matches!(&r.op, Op::LoadAsync { src, .. } if src.tensor.0 == v)));
    // §3.2: the next K block is loaded by one group of four waves only.
    let mut scopes = vec![];
    conditional_loads(&k.body, false, &mut scopes);
    assert_eq!(scopes, vec![Scope::WarpGroup]);
    // §5.1: three 16-query tiles per wave, 384 queries per block.
    let cfg = AttnConfig::default().mi300x();
    assert_eq!(
        (cfg.q_rows, cfg.kv_block, cfg.schedule),
        (48, 64, AttnSchedule::Mi300x)
    );
    assert_eq!(
        k.regs.iter().filter(|r| r.name.starts_with("att")).count(),
        3
    );
}

#[test]
fn seed001_passes_the_schedule_check_and_needs_its_k_wait() {
    for cfg in [
        AttnConfig::default().mi300x(),
        AttnConfig {
            causal: true,
            lse: true,
            ..AttnConfig::default().mi300x()
        },
    ] {
        verify(&attn_fwd::build(&cfg).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    }
    // Without the memory phase's wait, warpgroup 0's K loads of the next block are still in flight
    // when the other group (and its own next phase) reads that slot.
    let k = seed001();
    let wait = k
        .ops()
        .into_iter()
        .filter(|r| {
            matches!(
                r.op,
                Op::Wait {
                    queue: WaitQueue::Async,
                    ..
                }
            )
        })
        .nth(1)
        .unwrap()
        .index;
    assert!(verify(&k.without_op(wait).unwrap()).is_err());
}

#[test]
fn seed001_lds_reads_are_conflict_free() {
    let plan = kittens_ir::banks::plan(&seed001(), Arch::Cdna3).unwrap();
    let hot = plan.hot();
    assert!(hot.len() >= 8, "{hot:?}");
    for a in hot {
        assert_eq!(a.max_conflict, Some(1), "{a:?}");
    }
    // K's rows are 256 bytes, a multiple of the 128 bytes the 32 banks span: unswizzled, every row
    // starts in bank 0 (§4.2). The solver chose an XOR swizzle instead.
    let k_s = plan.tiles.iter().find(|t| t.buffer == "k_s").unwrap();
    assert!(k_s.chosen.starts_with("xor"), "{}", k_s.chosen);
}

#[test]
fn seed001_refuses_v_in_the_query_layout() {
    let e = attn_fwd::build(&AttnConfig {
        v_transposed: false,
        ..AttnConfig::default().mi300x()
    })
    .unwrap_err();
    assert!(e.to_string().contains("transposed"), "{e}");
    let e = attn_fwd::build(&AttnConfig {
        v_transposed: true,
        ..AttnConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("mi300x"), "{e}");
}
