//! Text-level checks of the HIP lowering on the registry's `gemm_bf16` (kittens-kernels, HipKittens
//! E.1 defaults): the IR's op-counted waits become the instruction counts HipKittens writes by hand,
//! and the schedule's implied ops appear where the ping-pong needs them.

use kittens_codegen::hip::{lower, LowerError};
use kittens_hw::Arch;
use kittens_kernels::gemm::{build, GemmConfig};

fn lowered(arch: Arch) -> Result<String, LowerError> {
    lower(
        &build(&GemmConfig::default()).expect("gemm_bf16 builds"),
        arch,
    )
    .map(|l| l.source)
}

/// HipKittens Fig. 21 lines 68 and 76: `s_waitcnt vmcnt(4)` then `vmcnt(6)` — two and three tile loads
/// of 128×64 bf16, each two 16-byte `buffer_load … lds` per wave of 8 (16 KiB / 8 waves / 1 KiB).
#[test]
fn gfx950_waits_match_the_seed() {
    let src = lowered(Arch::Cdna4).unwrap();
    let waits: Vec<&str> = src
        .lines()
        .map(str::trim)
        // The ragged-edge fix-up's full drain runs only in a tile crossing the last column.
        .filter(|l| l.starts_with("s_waitcnt_vmcnt<") && !l.contains("ragged edge"))
        .collect();
    assert_eq!(
        &waits[..2],
        ["s_waitcnt_vmcnt<4>();", "s_waitcnt_vmcnt<6>();"],
        "{waits:?}"
    );
    assert!(src.contains("2 x buffer_load_dwordx4_lds per wave"));
    // Ping-pong: the conditional stagger barrier before the loop, the re-join after it.
    let stagger = src.find("if ((wave / 4) == 1)").expect("stagger barrier");
    let rejoin = src.find("if ((wave / 4) == 0)").expect("re-join barrier");
    let hot = src.find("for (int v0_tile").expect("hot loop");
    assert!(stagger < hot && hot < rejoin);
    // Eight clusters per K step, each closed by a barrier between two fences; compute at priority 1.
    let body = &src[hot..rejoin];
    assert_eq!(body.matches("s_barrier();").count(), 8);
    assert_eq!(body.matches("sched_barrier<SCHED_NONE>();").count(), 16);
    assert_eq!(body.matches("s_setprio<1>();").count(), 4);
}

/// The same program needs 128 KiB of LDS; gfx942 has 64 KiB, and the lowering says so instead of
/// emitting code the compiler would reject.
#[test]
fn gfx942_refuses_the_lds_double_buffer() {
    match lowered(Arch::Cdna3) {
        Err(LowerError::Unsupported(msg)) => {
            assert!(msg.contains("131072") && msg.contains("65536"), "{msg}")
        }
        other => panic!("expected a budget error, got {other:?}"),
    }
}
