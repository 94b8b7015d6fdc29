//! sm_90a compile checks with NVRTC on a machine without a GPU: every wrapper of
//! the prelude compiles for sm_90a, with zero spills and the resources we expect.
//! NVRTC comes from `scripts/install-nvrtc.sh`, which these tests run when no NVRTC is found.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::{ensure_nvrtc, fresh_cache};
use kittens_codegen::cuda::{prelude_with, WgmmaInput};
use kittens_runtime::cuda::{compile_with_cache, CudaError, CudaModuleImage};

/// Compiles into a fresh cache of `tag`'s: the figures below come from NVRTC, never from a cubin an
/// earlier build left on disk.
fn compile_fresh(
    tag: &str,
    source: &str,
    kernel: &str,
    dynamic_shared: u32,
) -> Result<CudaModuleImage, CudaError> {
    compile_with_cache(
        source,
        kernel,
        "sm_90a",
        dynamic_shared,
        Some(&fresh_cache(tag)),
    )
}

/// A kernel that touches every prelude wrapper, so each one's PTX is assembled for sm_90a.
const SMOKE: &str = r#"
extern "C" __global__ void __launch_bounds__(384, 1)
prelude_smoke(const __grid_constant__ CUtensorMap map, float* out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const u32 base = (kt::smem_u32(smem) + 1023u) & ~1023u;
    const u32 bar = base + 65536;
    if (threadIdx.x == 0) {
        kt::mbarrier_init(bar, 1);
        kt::fence_mbarrier_init();
        kt::fence_proxy_async();
    }
    __syncthreads();
    if (kt::warpgroup_id() == 0) {
        kt::setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            kt::tma_prefetch_descriptor(&map);
            kt::mbarrier_arrive_expect_tx(bar, 16384);
            kt::tma_load_2d(base, &map, bar, 0, 0);
            kt::mbarrier_wait(bar, 0);
            kt::tma_store_2d(&map, base, 64, 0);
            kt::tma_store_commit();
            kt::tma_store_wait_read<0>();
        }
        return;
    }
    kt::setmaxnreg_inc<232>();
    kt::mbarrier_wait(bar, 0);
    float d[32];
    float e[32];
    kt::wgmma_fence();
    kt::wgmma_m64n64k16_bf16_ss(d, kt::desc_kmajor_sw128(base), kt::desc_kmajor_sw64(base + 8192), 0);
    kt::wgmma_m64n64k32_e4m3_ss(e, kt::desc_kmajor_sw32(base), kt::desc_kmajor_sw128(base + 8192), 0);
    kt::wgmma_commit();
    kt::wgmma_wait<0>();
    u32 r0, r1, r2, r3;
    kt::ldmatrix_x4(base + kt::lane_id() * 16, r0, r1, r2, r3);
    kt::ldmatrix_x4_trans(base + kt::lane_id() * 16, r0, r1, r2, r3);
    kt::stmatrix_x4(base + 32768 + kt::lane_id() * 16, r0, r1, r2, kt::pack_bf16x2(d[0], e[0]));
    kt::fence_proxy_async();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) s += d[i] + e[i];
    kt::mbarrier_arrive(bar);
    kt::st_global_b32(out + threadIdx.x, __float_as_uint(s) ^ r3);
}
"#;

#[test]
fn prelude_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let src = prelude_with(&[(WgmmaInput::Bf16, 64), (WgmmaInput::Fp8E4m3, 64)]) + SMOKE;
    let image =
        compile_fresh("prelude-smoke", &src, "prelude_smoke", 0).unwrap_or_else(|e| panic!("{e}"));
    assert!(!image.report.cached);
    let r = &image.report;
    eprintln!("prelude_smoke: {r:?}");
    assert!(
        image.cubin.starts_with(b"\x7fELF"),
        "NVRTC returned a cubin"
    );
    assert_eq!((r.spill_stores, r.spill_loads), (0, 0));
    assert!(
        r.registers > 0 && r.registers <= 168,
        "launch bounds cap 384 threads at 168 registers"
    );
    assert!(
        r.warnings.iter().all(|w| !w.contains("C7508")),
        "setmaxnreg ignored: {:?}",
        r.warnings
    );
}
