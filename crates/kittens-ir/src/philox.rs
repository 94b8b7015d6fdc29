//! Philox 4x32-10, the counter-based random generator every backend draws dropout masks from.
//!
//! Why counter-based: a mask element's bits are a pure function of (seed, offset, element index), so
//! the CPU interpreter, the HIP lowering and the CUDA lowering draw the same mask bit for bit without
//! sharing any state, in any order, on any number of threads (Random123 §2; PyTorch and FlashAttention
//! key their dropout the same way).
//!
//! The generator (Random123 §3.2, "Philox"): ten rounds over a 4-word counter with a 2-word key. A round
//! multiplies counter words 0 and 2 by two constants, keeps both halves of each 64-bit product, and mixes
//! the high halves with the other two words and the key; the key is bumped by two Weyl constants between
//! rounds. The constants are the paper's (`PHILOX_M4x32_0/1`, `PHILOX_W32_0/1`).
//!
//! How the IR uses it ([`stream`]): element `e` of a random stream keyed by `(seed, offset)` is word
//! `e mod 4` of `philox(counter = [e/4 lo, e/4 hi, offset lo, offset hi], key = [seed lo, seed hi])`, and
//! its uniform value is the word's top 24 bits times 2^-24 ([`uniform`]): exact in f32, in [0, 1).
//! A device thread holding 8 consecutive elements of a stream whose index starts at a multiple of 4
//! makes two generator calls, one per 4 elements.

/// Multipliers of the two Philox S-boxes (Random123 `PHILOX_M4x32_0`, `PHILOX_M4x32_1`).
pub const M0: u32 = 0xD251_1F53;
pub const M1: u32 = 0xCD9E_8D57;
/// Weyl increments of the key schedule (Random123 `PHILOX_W32_0`, `PHILOX_W32_1`: the golden ratio and
/// √3 − 1 as 32-bit fractions).
pub const W0: u32 = 0x9E37_79B9;
pub const W1: u32 = 0xBB67_AE85;
/// Rounds of the variant used everywhere here (Philox 4x32-10).
pub const ROUNDS: u32 = 10;

fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One round: `[hi(M1·c2) ^ c1 ^ k0, lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0)]`.
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(M0, c[0]);
    let (hi1, lo1) = mulhilo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Philox 4x32 with `rounds` rounds (the key is bumped before every round but the first).
pub fn philox4x32_rounds(counter: [u32; 4], key: [u32; 2], rounds: u32) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..rounds {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// Philox 4x32-10.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    philox4x32_rounds(counter, key, ROUNDS)
}

/// The counter and key of element group `group` (elements `4·group .. 4·group + 4`) of the stream
/// keyed by `(seed, offset)`.
pub fn counter_key(seed: u64, offset: u64, group: u64) -> ([u32; 4], [u32; 2]) {
    (
        [
            group as u32,
            (group >> 32) as u32,
            offset as u32,
            (offset >> 32) as u32,
        ],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// The random word of element `index` of the stream keyed by `(seed, offset)`.
pub fn stream(seed: u64, offset: u64, index: u64) -> u32 {
    let (c, k) = counter_key(seed, offset, index / 4);
    philox4x32_10(c, k)[(index % 4) as usize]
}

/// A random word as a uniform value in [0, 1): its top 24 bits times 2^-24, exact in f32.
pub fn uniform(word: u32) -> f32 {
    (word >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The known-answer vectors of Random123's `tests/kat_vectors` (DEShawResearch/random123, the
    /// three `philox4x32 10` lines: counter, key, expected output). They are the published reference,
    /// not this module's output.
    #[test]
    fn random123_known_answers() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0, 0, 0, 0],
                [0, 0],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                // The digits of π, as Random123 writes them.
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (c, k, want) in kat {
            assert_eq!(philox4x32_10(c, k), want, "counter {c:x?} key {k:x?}");
        }
    }

    /// The stream addresses the generator as documented: element `e` is word `e mod 4` of group `e/4`,
    /// the offset is counter words 2 and 3, the seed the key (checked on the zero and the π vectors).
    #[test]
    fn stream_indexes_counter_and_key() {
        let zero = [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8];
        for (e, &x) in zero.iter().enumerate() {
            assert_eq!(stream(0, 0, e as u64), x);
        }
        let (seed, offset) = (0x299f_31d0_a409_3822u64, 0x0370_7344_1319_8a2eu64);
        let (c, k) = counter_key(seed, offset, 0x85a3_08d3_243f_6a88);
        assert_eq!(c, [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344]);
        assert_eq!(k, [0xa409_3822, 0x299f_31d0]);
    }

    #[test]
    fn uniform_is_the_top_24_bits_in_unit_interval() {
        assert_eq!(uniform(0), 0.0);
        assert_eq!(uniform(0xff), 0.0);
        assert_eq!(uniform(0x100), 1.0 / 16_777_216.0);
        assert_eq!(uniform(0x8000_0000), 0.5);
        assert!(uniform(u32::MAX) < 1.0);
    }
}
