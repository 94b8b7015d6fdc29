//! Hopper fragments against the PTX ISA's own formulas, written out here as the manual states
//! them (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16 with floating point type" and
//! "wgmma .m64nNk16 register fragment layout for accumulator matrix D"), independently of the
//! quad-tile construction in `mma/hopper.rs`.

use kittens_hw::mma::{self, Entry, Operand};

fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
    v.sort();
    v
}

/// PTX: groupID = laneid >> 2, threadID_in_group = laneid % 4.
fn ptx_m16n8k16(op: Operand, lane: u32, i: u32) -> (u32, u32) {
    let (g, t) = (lane >> 2, lane % 4);
    match op {
        // a_i: row = g for i in {0,1,4,5}, else g + 8; col = 2t + (i & 1), plus 8 for i >= 4.
        Operand::A => {
            let row = if i < 2 || (4..6).contains(&i) {
                g
            } else {
                g + 8
            };
            let col = t * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
            (row, col)
        }
        // b_i: row (k) = 2t + (i & 1), plus 8 for i >= 2; col = g.
        Operand::B => (t * 2 + (i & 1) + if i >= 2 { 8 } else { 0 }, g),
        // c_i: row = g for i < 2, else g + 8; col = 2t + (i & 1).
        Operand::D => (if i < 2 { g } else { g + 8 }, t * 2 + (i & 1)),
    }
}

#[test]
fn mma_m16n8k16_bf16_fragments_follow_ptx() {
    let i = mma::default_bf16(kittens_hw::Arch::Hopper);
    assert_eq!((i.m, i.n, i.k, i.lanes), (16, 8, 16, 32));
    for op in Operand::ALL {
        let want: Vec<Entry> = (0..32)
            .flat_map(|lane| {
                (0..i.elems_per_lane(op)).map(move |slot| {
                    let (row, col) = ptx_m16n8k16(op, lane, slot);
                    Entry {
                        lane,
                        slot,
                        row,
                        col,
                    }
                })
            })
            .collect();
        assert_eq!(sorted(i.map(op)), sorted(want), "{op}");
    }
    assert_eq!(
        (
            i.regs_per_lane(Operand::A),
            i.regs_per_lane(Operand::B),
            i.regs_per_lane(Operand::D)
        ),
        (4, 2, 4)
    );
}

/// PTX wgmma D: row = 16·(warp in warpgroup) + groupID + 8·((i mod 4) div 2);
/// col = 8·(i div 4) + 2·threadID_in_group + (i mod 2); N/2 f32 per thread.
#[test]
fn wgmma_accumulator_follows_ptx_for_every_n() {
    for n in (8..=256).step_by(8) {
        let want: Vec<Entry> = (0..128u32)
            .flat_map(|lane| {
                let (w, g, t) = (lane / 32, (lane % 32) >> 2, lane % 4);
                (0..n / 2).map(move |i| Entry {
                    lane,
                    slot: i,
                    row: 16 * w + g + 8 * ((i % 4) / 2),
                    col: 8 * (i / 4) + 2 * t + (i % 2),
                })
            })
            .collect();
        assert_eq!(
            sorted(mma::wgmma_accumulator(n).unwrap()),
            sorted(want),
            "n = {n}"
        );
    }
}

/// wgmma's register A is the m16n8k16 A fragment, one 16-row slab per warp.
#[test]
fn wgmma_register_a_is_four_stacked_mma_a_fragments() {
    let w = mma::instr("wgmma.m64n256k16.f32.bf16.bf16").unwrap();
    for e in w.map(Operand::A) {
        let (row, col) = ptx_m16n8k16(Operand::A, e.lane % 32, e.slot);
        assert_eq!((e.row, e.col), (16 * (e.lane / 32) + row, col), "{e:?}");
    }
}
