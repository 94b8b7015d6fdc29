//! The 24-bit multiply-adds (CDNA3 ISA guide, VOP3 opcodes: V_MAD_I32_I24 = 0x1C2, V_MAD_U32_U24 =
//! 0x1C3), which the compiler emits for the strip kernels' 32-bit index arithmetic, on a
//! hand-assembled kernel: out[i] = mad24(in[i], in[i], 4·i). Inputs carry bits above bit 23 (which
//! both ignore) and, for the signed form, a set bit 23 (a negative 24-bit value).

use kittens_amdsim::exec::{self, Dispatch, Memory, Options, Program, Stats};
use kittens_amdsim::kernarg::{pack, ArgValue};
use kittens_amdsim::{KernArg, Kernel, KernelDescriptor};
use kittens_hw::Arch;

const S_LOAD_DWORDX4_S4_S0: [u32; 2] = [0xC00A_0100, 0]; // s_load_dwordx4 s[4:7], s[0:1], 0x0
const S_WAITCNT_LGKM0: u32 = 0xBF8C_C07F; // s_waitcnt lgkmcnt(0)
const V_LSHLREV_V1_2_V0: u32 = 0x2402_0082; // v_lshlrev_b32_e32 v1, 2, v0
const GLOBAL_LOAD_V2: [u32; 2] = [0xDC50_8000, 0x0204_0001]; // global_load_dword v2, v1, s[4:5]
const S_WAITCNT_VM0: u32 = 0xBF8C_0F70; // s_waitcnt vmcnt(0)
const GLOBAL_STORE_V3: [u32; 2] = [0xDC70_8000, 0x0006_0301]; // global_store_dword v1, v3, s[6:7]
const S_ENDPGM: u32 = 0xBF81_0000;

/// `v_mad_*_24 v3, v2, v2, v1` (VOP3a: opcode in bits 25:16, vdst 7:0; src0 8:0, src1 17:9,
/// src2 26:18 of the second word, VGPR n as 256 + n).
fn mad(opcode: u32) -> [u32; 2] {
    [0xD000_0000 | opcode << 16 | 3, 258 | 258 << 9 | 257 << 18]
}

fn run(opcode: u32, input: &[u32]) -> Vec<u32> {
    let mut words = vec![];
    words.extend(S_LOAD_DWORDX4_S4_S0);
    words.push(S_WAITCNT_LGKM0);
    words.push(V_LSHLREV_V1_2_V0);
    words.extend(GLOBAL_LOAD_V2);
    words.push(S_WAITCNT_VM0);
    words.extend(mad(opcode));
    words.extend(GLOBAL_STORE_V3);
    words.push(S_ENDPGM);
    let arg = |offset| KernArg {
        offset,
        size: 8,
        kind: "global_buffer".into(),
    };
    let k = Kernel {
        name: "mad24".into(),
        arch: Arch::Cdna3,
        code: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        text_offset: 0,
        descriptor: KernelDescriptor {
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            kernarg_size: 16,
            rsrc1: 0,
            rsrc2: 2 << 1 | 1 << 7,
            rsrc3: 0,
            code_properties: 1 << 3,
        },
        args: vec![arg(0), arg(8)],
        kernarg_segment_size: 16,
        group_segment_size: 0,
        max_workgroup_size: 64,
        wavefront_size: 64,
        sgpr_count: 8,
        vgpr_count: 4,
        agpr_count: 0,
    };
    let prog = Program::new(&k).unwrap();
    let mut mem = Memory::new();
    let a = mem.alloc(input.iter().flat_map(|x| x.to_le_bytes()).collect());
    let b = mem.alloc(vec![0; 256]);
    let kernarg = mem.alloc(pack(&k, &[ArgValue::Ptr(a), ArgValue::Ptr(b)]).unwrap());
    let d = Dispatch {
        workgroups: [1, 1, 1],
        workgroup_size: 64,
        kernarg,
    };
    exec::run(
        &prog,
        &mut mem,
        d,
        &Options::default(),
        &mut Stats::default(),
    )
    .unwrap();
    mem.get(b)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn inputs() -> Vec<u32> {
    // Bits above 23 set in every other lane; bit 23 set in every fourth.
    (0..64u32)
        .map(|i| {
            ((i.wrapping_mul(2_654_435_761) >> 12) & 0x7f_ffff) | (i % 2) << 28 | (i % 4 / 3) << 23
        })
        .collect()
}

#[test]
fn v_mad_u32_u24_multiplies_the_low_24_bits() {
    let x = inputs();
    let want: Vec<u32> = (0..64u64)
        .map(|i| {
            let a = u64::from(x[i as usize] & 0xff_ffff);
            ((a * a + 4 * i) & 0xffff_ffff) as u32
        })
        .collect();
    assert_eq!(run(0x1c3, &x), want);
}

#[test]
fn v_mad_i32_i24_multiplies_the_sign_extended_low_24_bits() {
    let x = inputs();
    let want: Vec<u32> = (0..64i64)
        .map(|i| {
            let low = i64::from(x[i as usize] & 0xff_ffff);
            let a = if low >= 1 << 23 { low - (1 << 24) } else { low };
            ((a * a + 4 * i) & 0xffff_ffff) as u32
        })
        .collect();
    assert!(x.iter().any(|v| v & 1 << 23 != 0));
    assert_eq!(run(0x1c2, &x), want);
}
