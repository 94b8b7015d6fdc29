//! What the strip lowering emits for the memory-bound kernels' accesses, on both vendors' dialects:
//! the interleaved rotary pair moves as 16-byte vectors (not element by element), the cos/sin row
//! broadcast across heads is loaded once per lane group, and dropout whose stream indices are
//! provably aligned draws whole Philox blocks only.
//!
//! These stay checks of the emitted text: they are performance properties with no check on a compiler's
//! output yet (each test says why), and the behaviour they must not change — results equal to the
//! interpreter's and the f64 reference, the dropout mask bit for bit — is kittens-runtime
//! tests/amd_strip.rs (HIP emulation) and the interpreter tests.

use kittens_codegen::lower;
use kittens_hw::Target;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::layernorm::{self, LayerNormConfig};
use kittens_kernels::rotary::{self, RotaryConfig, RotaryRows};

const TARGETS: [(Target, &str, u32); 2] = [
    (Target::Sm90a, "uint4", 32),
    (Target::Gfx950, "kittens::u32x4", 64),
];

fn count(src: &str, pat: &str) -> usize {
    src.matches(pat).count()
}

/// sm_90a's source only: on gfx950 the compiled code is checked (kittens-runtime tests/amd_strip.rs,
/// `interleaved_rotary_moves_pairs_as_16_byte_vectors_on_gfx950`). NVRTC's PTX of this source stores
/// the first 16 bytes as four 4-byte stores (the second as one 16-byte store), so a check on NVIDIA's
/// compiled code would not hold yet.
#[test]
fn interleaved_rotary_moves_pairs_as_vectors() {
    for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
        for along in [RotaryRows::Heads, RotaryRows::Positions] {
            let cfg = RotaryConfig {
                along,
                ..RotaryConfig::new(128, layout, true)
            };
            let k = rotary::build(&cfg).unwrap();
            for (t, v16, _) in TARGETS.into_iter().filter(|(t, ..)| *t == Target::Sm90a) {
                let src = lower(&k, t).unwrap().source;
                // D128: a chunk of 8 pairs is 32 contiguous bytes, two 16-byte accesses each way.
                let loads = count(
                    &src,
                    &format!("*reinterpret_cast<const {v16}*>(g_x + kt_off"),
                );
                let stores = count(&src, &format!("*reinterpret_cast<{v16}*>(g_out + kt_off"));
                assert_eq!((loads, stores), (2, 2), "{t} {cfg:?}");
            }
        }
    }
}

#[test]
fn rotary_heads_along_rows_broadcast_the_table_row() {
    // Kept as text: the lane-to-chunk map is a load count per lane, which no compiled check reads.
    let k = rotary::build(&RotaryConfig {
        along: RotaryRows::Heads,
        ..RotaryConfig::new(128, AttnLayout::Bshd, false)
    })
    .unwrap();
    for (t, _, _) in TARGETS {
        let src = lower(&k, t).unwrap().source;
        // 64 table entries are 8 chunks: lane l holds chunk l % 8, and every product reads the
        // lane's own chunk.
        assert!(src.contains("const int kt_k = kt_lane % 8;"), "{t}");
        assert!(
            src.contains("_cos[kt_e_i]") && src.contains("_sin[kt_e_i]"),
            "{t}"
        );
    }
}

#[test]
fn aligned_dropout_draws_whole_philox_blocks() {
    // Kept as text: a one-value draw computes a whole Philox block too, so only the call tells them apart.
    for dim in [776, 2048, 4104] {
        for (t, _, lanes) in TARGETS {
            let k = layernorm::build(&LayerNormConfig::new(dim, 0.1, lanes)).unwrap();
            let src = lower(&k, t).unwrap().source;
            assert!(src.contains("ks::uniform4(&"), "{t} D{dim}");
            assert!(!src.contains("ks::uniform1(("), "{t} D{dim}");
        }
    }
}

#[test]
fn a_run_of_loads_is_in_flight_before_any_conversion() {
    // Kept as text: the compilers reschedule loads, so this is the order the lowering hands them.
    // Rotary loads x's two members and both table rows one after the other: every vector load of
    // the run comes before the first conversion to f32 (a conversion inside a load's own branch
    // made each load wait for the previous one).
    for interleaved in [false, true] {
        let k = rotary::build(&RotaryConfig::new(128, AttnLayout::Bshd, interleaved)).unwrap();
        for (t, v16, _) in TARGETS {
            let src = lower(&k, t).unwrap().source;
            let body = &src[src.find("Lowered from").unwrap()..];
            let last_load = body
                .rfind(&format!("*reinterpret_cast<const {v16}*>(g_sin"))
                .unwrap();
            // A conversion to f32, or (a bf16 register kept at 16 bits on sm_90a) a move of the bits.
            let first_convert = ["bf16_to_f32(", ".set_bits("]
                .iter()
                .filter_map(|c| body.find(c))
                .min()
                .unwrap();
            assert!(last_load < first_convert, "{t} interleaved={interleaved}");
        }
    }
}
