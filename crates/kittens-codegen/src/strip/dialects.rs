//! The two dialects of the strip emitter: CUDA for sm_90a and HIP for gfx942/gfx950.

use super::Dialect;
use crate::cexpr::{self, ident};
use kittens_hw::{dtype::DType, Arch, Target};

/// CUDA C++ for sm_90a (compiled by NVRTC): warps of 32, `shfl.xor`, CUDA math functions. Globals are
/// not `const`/`__restrict__`: an in-place rotary passes one buffer as input and output.
pub const CUDA: Dialect = Dialect {
    target: Target::Sm90a,
    lanes: 32,
    prelude: concat!(
        include_str!("prelude_cuda.cuh"),
        include_str!("bf16_regs.h")
    ),
    names: cexpr::CUDA,
    thread: "threadIdx.x",
    block: "blockIdx.x",
    // A kernel asking for `r > 1` resident blocks per SM (`kittens_ir::Grid::resident`) gets the
    // minimum-blocks bound, which caps its registers at 65536 / (r · threads).
    launch: |t, r| match r {
        0 | 1 => format!("void __launch_bounds__({t})"),
        _ => format!("void __launch_bounds__({t}, {r})"),
    },
    // Launched as the programmatic dependent of the kernel before it (the split-K GEMM's
    // reduction), a strip kernel waits for that grid's completion and memory first
    // (`griddepcontrol.wait`, PTX ISA §9.7.13.9); launched plainly, the wait returns at once. The
    // kernels before never trigger early: the dependent launches as their blocks exit.
    entry_prologue: "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n",
    entry: |name| format!("{}_sm90_lowered", ident(name)),
    shfl_xor: |v, m| format!("__shfl_xor_sync(0xffffffffu, {v}, {m})"),
    barrier: "__syncthreads()",
    vec16: "uint4",
    vec8: "uint2",
    vec4: "u32",
    elem: |d| match d {
        DType::Bf16 => Some("bf16_t"),
        DType::F32 => Some("float"),
        _ => None,
    },
    const_inputs: false,
    fmax: "fmaxf",
    fmin: "fminf",
    fabs: "fabsf",
    exp: |x| format!("expf({x})"),
    exp2: |x| format!("exp2f({x})"),
    log: |x| format!("logf({x})"),
    rsqrt: |x| format!("rsqrtf({x})"),
    // The logistic with the approximate exponential and division (CUDA C++ Programming Guide,
    // "Intrinsic Functions": `__expf` within 2 + ⌊1.173·|x|⌋ ulp, `__fdividef` 2 ulp, a few instructions
    // where `expf` and the IEEE division take tens): in SwiGLU, which moves 6 bytes per element, those
    // instructions are a large share of the time. Like `exp`, a transcendental whose bits the
    // backends do not share; far below the bf16 rounding of the results. At `1 + e^(−x) = ∞` the
    // division gives 0 (`x` finite), the limit.
    logistic: Some(|num, x| format!("__fdividef({num}, __fadd_rn(1.0f, __expf(-({x}))))")),
    // The `_rn` intrinsics are never contracted into FMAs (CUDA C++ Programming Guide, "Intrinsic
    // Functions").
    arith: |op, a, b| {
        let f = match op {
            '+' => "__fadd_rn",
            '-' => "__fsub_rn",
            '*' => "__fmul_rn",
            _ => "__fdiv_rn",
        };
        format!("{f}({a}, {b})")
    },
    prologue: "",
    inf: "__int_as_float(0x7f800000)",
    nan: "__int_as_float(0x7fc00000)",
    wave_sync: "__syncwarp();",
    bf16_regs: true,
};

/// HIP C++ for an AMD target (no ROCm headers: the kittens prelude, then the `ks::` helpers): waves of
/// 64, `ds_bpermute` exchanges (`kittens::shfl_xor_f32`), compiler builtins for math. The entry is the
/// kernel's name, as the host emulation calls it.
pub fn hip(arch: Arch) -> Dialect {
    Dialect {
        target: Target::from(arch),
        lanes: 64,
        prelude: concat!(
            include_str!("../hip/prelude.hip"),
            include_str!("prelude_hip.h")
        ),
        names: cexpr::HIP,
        thread: "kittens::thread_id()",
        block: "kittens::block_id_x()",
        // `kittens_ir::Grid::resident` is not asked of AMD: its blocks keep their register use.
        launch: |t, _| format!("KITTENS_LAUNCH_BOUNDS({t}) void"),
        entry_prologue: "",
        entry: ident,
        shfl_xor: |v, m| format!("kittens::shfl_xor_f32<{m}>({v})"),
        // A bare s_barrier orders no memory: the LDS writes before it must have completed (lgkmcnt 0)
        // and no LDS read may be hoisted above it, as a workgroup release/acquire pair requires
        // (LLVM AMDGPUUsage, memory model for GFX942: workgroup release fence = s_waitcnt lgkmcnt(0)).
        barrier:
            "kittens::s_waitcnt_lgkmcnt<0>(); kittens::s_barrier(); kittens::s_waitcnt_lgkmcnt<0>()",
        vec16: "kittens::u32x4",
        vec8: "kittens::u32x2",
        vec4: "kittens::u32",
        elem: |d| match d {
            DType::Bf16 | DType::F32 => Some(crate::hip::c_elem(d)),
            _ => None,
        },
        const_inputs: true,
        fmax: "__builtin_fmaxf",
        fmin: "__builtin_fminf",
        fabs: "__builtin_fabsf",
        exp: |x| format!("kittens::exp2_f32(1.4426950408889634f * {x})"),
        exp2: |x| format!("kittens::exp2_f32({x})"),
        log: |x| format!("(0.6931471805599453f * __builtin_log2f({x}))"),
        rsqrt: |x| format!("(1.0f / __builtin_sqrtf({x}))"),
        logistic: None,
        arith: |op, a, b| format!("({a} {op} {b})"),
        // clang contracts a·b + c into an FMA in HIP device code by default; the IR rounds each op.
        prologue: "#pragma clang fp contract(off)",
        inf: "__builtin_inff()",
        nan: "__builtin_nanf(\"\")",
        wave_sync: "",
        // VGPRs could pack too; the AMD strip kernels are left as the ISA emulator knows them.
        bf16_regs: false,
    }
}
