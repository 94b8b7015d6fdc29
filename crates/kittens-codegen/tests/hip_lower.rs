//! The HIP lowering of the registry's `gemm_bf16` (kittens-kernels, HipKittens E.1 defaults) and what it
//! refuses. Its waits, barriers and priorities as clang compiles them for gfx950 are checked in
//! kittens-runtime tests/amd_registry.rs (`ping_pong_waits_and_clusters_survive_compilation_on_gfx950`).

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
