//! The emulator's asynchronous memory on a hand-assembled kernel (fields placed by the CDNA3 ISA
//! guide's "Microcode Formats"): out[i] = in[i] + 1 with a global load, its `s_waitcnt vmcnt(0)`,
//! an add and a store. With the wait the result is right under every seed; without it the add reads
//! the load's destination before the load lands and the stale value (0) goes out.

mod support;

use kittens_amdsim::exec::{self, Dispatch, Memory, Options, Program, Stats};
use kittens_amdsim::kernarg::{pack, ArgValue};
use kittens_amdsim::Kernel;
use support::{
    GLOBAL_LOAD_V2, GLOBAL_STORE_V3, S_ENDPGM, S_LOAD_DWORDX4_S4_S0, S_WAITCNT_LGKM0,
    S_WAITCNT_VM0, V_LSHLREV_V1_2_V0,
};

const V_ADD_V3_1_V2: u32 = 0x6806_0481; // v_add_u32_e32 v3, 1, v2

fn kernel(with_wait: bool) -> Kernel {
    let mut words = vec![];
    words.extend(S_LOAD_DWORDX4_S4_S0);
    words.push(S_WAITCNT_LGKM0);
    words.push(V_LSHLREV_V1_2_V0);
    words.extend(GLOBAL_LOAD_V2);
    if with_wait {
        words.push(S_WAITCNT_VM0);
    }
    words.push(V_ADD_V3_1_V2);
    words.extend(GLOBAL_STORE_V3);
    words.push(S_ENDPGM);
    support::kernel(&words, 8, 4)
}

fn run(with_wait: bool, seed: u64) -> (Vec<u32>, Stats) {
    run_with(with_wait, seed, true)
}

fn run_with(with_wait: bool, seed: u64, poison_in_flight: bool) -> (Vec<u32>, Stats) {
    let input: Vec<u32> = (0..64u32).map(|i| i * 7 + 3).collect();
    let opts = Options {
        seed,
        poison_in_flight,
        ..Options::default()
    };
    support::run_kernel(&kernel(with_wait), &input, 256, &opts)
}

#[test]
fn the_wait_makes_the_load_visible() {
    let want: Vec<u32> = (0..64).map(|i| i * 7 + 4).collect();
    for seed in 0..8 {
        let (out, stats) = run(true, seed);
        assert_eq!(out, want, "seed {seed}");
        // Two waits, and the vmcnt one found the load still in flight (latency >= 8 ticks).
        assert_eq!(stats.waits, 2);
        assert!(stats.stalled_waits >= 1, "{stats:?}");
    }
}

#[test]
fn without_the_wait_the_add_reads_stale_registers() {
    for seed in 0..8 {
        let (out, _) = run_with(false, seed, false);
        // v2 was 0 when v_add read it: every lane stores 1.
        assert_eq!(out, vec![1; 64], "seed {seed}");
    }
}

/// By default a load's destination holds a poison value while the load is in flight, so reading it
/// early is wrong whatever the register held before (here it held 0, which the add turned into 1:
/// a stale value a test could mistake for data).
#[test]
fn without_the_wait_the_add_reads_the_in_flight_poison() {
    for seed in 0..8 {
        let (out, _) = run(false, seed);
        assert_eq!(out, vec![0xffc0_ffc0u32.wrapping_add(1); 64], "seed {seed}");
    }
}

#[test]
fn an_access_outside_every_buffer_is_a_fault_naming_the_instruction() {
    let k = kernel(true);
    let prog = Program::new(&k).unwrap();
    let mut mem = Memory::new();
    let a = mem.alloc(vec![0; 16]); // 4 dwords: lanes 4.. read past the end
                                    // The load is the fourth instruction, at byte 0x10 (s_load 8 bytes, two 4-byte ones).
    let b = mem.alloc(vec![0; 256]);
    let kernarg = mem.alloc(pack(&k, &[ArgValue::Ptr(a), ArgValue::Ptr(b)]).unwrap());
    let d = Dispatch {
        workgroups: [1, 1, 1],
        workgroup_size: 64,
        kernarg,
    };
    let e = exec::run(
        &prog,
        &mut mem,
        d,
        &Options::default(),
        &mut Stats::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("memory fault") && e.contains("issued at 0x10"),
        "{e}"
    );
}

/// A kernel that never ends stops at the run's instruction budget with a typed error.
#[test]
fn an_endless_loop_hits_the_instruction_budget() {
    let mut k = kernel(true);
    // s_branch to itself: SOPP opcode 2, SIMM16 = -1 (target = pc + 4 + 4 * -1).
    k.code = 0xBF82_FFFFu32.to_le_bytes().to_vec();
    let prog = Program::new(&k).unwrap();
    let mut mem = Memory::new();
    let kernarg = mem.alloc(pack(&k, &[ArgValue::Ptr(0), ArgValue::Ptr(0)]).unwrap());
    let opts = Options {
        max_instructions: 1000,
        ..Options::default()
    };
    let d = Dispatch {
        workgroups: [1, 1, 1],
        workgroup_size: 64,
        kernarg,
    };
    let e = exec::run(&prog, &mut mem, d, &opts, &mut Stats::default()).unwrap_err();
    assert!(matches!(e, exec::ExecError::Budget(1000)), "{e}");
}
