//! A hand-assembled kernel (gfx942 unless told) of one 64-lane workgroup run on the emulator: two pointer
//! arguments (`s[4:5]` in, `s[6:7]` out once `s_load_dwordx4 s[4:7], s[0:1]` has run), the work-item
//! id in `v0`.
#![allow(dead_code)]

use kittens_amdsim::exec::{self, Dispatch, Memory, Options, Program, Stats};
use kittens_amdsim::kernarg::{pack, ArgValue};
use kittens_amdsim::{KernArg, Kernel, KernelDescriptor};
use kittens_hw::Arch;

pub const S_LOAD_DWORDX4_S4_S0: [u32; 2] = [0xC00A_0100, 0]; // s_load_dwordx4 s[4:7], s[0:1], 0x0
pub const S_WAITCNT_LGKM0: u32 = 0xBF8C_C07F; // s_waitcnt lgkmcnt(0)
pub const S_WAITCNT_VM0: u32 = 0xBF8C_0F70; // s_waitcnt vmcnt(0)
pub const S_ENDPGM: u32 = 0xBF81_0000;
pub const V_LSHLREV_V1_2_V0: u32 = 0x2402_0082; // v_lshlrev_b32_e32 v1, 2, v0
pub const GLOBAL_LOAD_V2: [u32; 2] = [0xDC50_8000, 0x0204_0001]; // global_load_dword v2, v1, s[4:5]
pub const GLOBAL_STORE_V3: [u32; 2] = [0xDC70_8000, 0x0006_0301]; // global_store_dword v1, v3, s[6:7]

/// The start of a per-lane kernel: the pointers loaded, `v1 = 4·i` and `v2 = in[i]` landed.
pub fn load_lane_word() -> Vec<u32> {
    let mut words = S_LOAD_DWORDX4_S4_S0.to_vec();
    words.extend([S_WAITCNT_LGKM0, V_LSHLREV_V1_2_V0]);
    words.extend(GLOBAL_LOAD_V2);
    words.push(S_WAITCNT_VM0);
    words
}

/// The gfx942 kernel of `words` with `sgprs` and `vgprs` registers.
pub fn kernel(words: &[u32], sgprs: u32, vgprs: u32) -> Kernel {
    kernel_on(Arch::Cdna3, words, [sgprs, vgprs, 0])
}

/// The kernel of `words` for `arch` with `[sgprs, vgprs, agprs]` registers.
pub fn kernel_on(arch: Arch, words: &[u32], [sgprs, vgprs, agprs]: [u32; 3]) -> Kernel {
    let arg = |offset| KernArg {
        offset,
        size: 8,
        kind: "global_buffer".into(),
    };
    Kernel {
        name: "hand".into(),
        arch,
        code: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        text_offset: 0,
        descriptor: KernelDescriptor {
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            kernarg_size: 16,
            rsrc1: 0,
            // USER_SGPR_COUNT = 2 (the kernarg pointer), workgroup id X enabled.
            rsrc2: 2 << 1 | 1 << 7,
            rsrc3: 0,
            // ENABLE_SGPR_KERNARG_SEGMENT_PTR only: the pointer is in s[0:1].
            code_properties: 1 << 3,
        },
        args: vec![arg(0), arg(8)],
        kernarg_segment_size: 16,
        group_segment_size: 0,
        max_workgroup_size: 64,
        wavefront_size: 64,
        sgpr_count: sgprs,
        vgpr_count: vgprs,
        agpr_count: agprs,
    }
}

/// Runs `k` with `input` behind the first pointer and `out_bytes` bytes of 0xaa behind the second (a
/// word the kernel does not store stays 0xaaaaaaaa) under `opts`; returns the second buffer as words
/// and the run's statistics.
pub fn run_kernel(
    k: &Kernel,
    input: &[u32],
    out_bytes: usize,
    opts: &Options,
) -> (Vec<u32>, Stats) {
    let prog = Program::new(k).unwrap();
    let mut mem = Memory::new();
    let a = mem.alloc(input.iter().flat_map(|x| x.to_le_bytes()).collect());
    let b = mem.alloc(vec![0xaa; out_bytes]);
    let kernarg = mem.alloc(pack(k, &[ArgValue::Ptr(a), ArgValue::Ptr(b)]).unwrap());
    let d = Dispatch {
        workgroups: [1, 1, 1],
        workgroup_size: 64,
        kernarg,
    };
    let mut stats = Stats::default();
    exec::run(&prog, &mut mem, d, opts, &mut stats).unwrap();
    let out = mem
        .get(b)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (out, stats)
}

/// [`run_kernel`] of `words` under the default options, the output alone.
pub fn run(words: &[u32], input: &[u32], out_bytes: usize, sgprs: u32, vgprs: u32) -> Vec<u32> {
    run_kernel(
        &kernel(words, sgprs, vgprs),
        input,
        out_bytes,
        &Options::default(),
    )
    .0
}
