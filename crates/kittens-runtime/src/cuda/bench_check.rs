//! The numerics the GEMM benchmarks share: bf16 conversions, random inputs, the median, our C against
//! the vendor's over every element, and f64 dot products at random entries (docs/performance.md, "Method",
//! step 4).

/// f32 → bf16 bits, round to nearest even (NaN stays NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return 0x7fc0;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Uniform bf16 values in [-1, 1) from a xorshift64* stream, filled on all cores.
pub fn random_bf16(len: usize, seed: u64) -> Vec<u16> {
    random_fill(len, seed, |u| f32_to_bf16(2.0 * u - 1.0))
}

/// `len` values `encode(u)` of uniform `u` in [0, 1) from a xorshift64* stream per chunk (seeded from
/// `seed` and the chunk's index, so the values do not depend on timing), filled on all cores: the
/// benchmarks' inputs are gigabytes.
pub(crate) fn random_fill<T: Copy + Default + Send>(
    len: usize,
    seed: u64,
    encode: impl Fn(f32) -> T + Copy + Send,
) -> Vec<T> {
    let mut out = vec![T::default(); len];
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let chunk = len.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut x = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)) | 1;
                for v in part {
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
                    *v = encode((r >> 40) as f32 / (1u64 << 24) as f32); // [0, 1)
                }
            });
        }
    });
    out
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Elementwise comparison of two bf16 matrices.
pub struct Comparison {
    pub rel_frobenius: f64,
    pub max_rel: f64,
    pub non_finite: usize,
}

/// Compares on all cores (a 16384 × 57344 C has 939 M elements): partial sums per chunk, combined.
pub fn compare(ours: &[u16], reference: &[u16]) -> Comparison {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let chunk = ours.len().div_ceil(threads).max(1);
    let parts: Vec<[f64; 5]> = std::thread::scope(|s| {
        let handles: Vec<_> = ours
            .chunks(chunk)
            .zip(reference.chunks(chunk))
            .map(|(o, r)| s.spawn(move || compare_part(o, r)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or([f64::NAN; 5]))
            .collect()
    });
    let [mut diff2, mut ref2, mut max_diff, mut max_ref, mut non_finite] = [0f64; 5];
    for p in parts {
        diff2 += p[0];
        ref2 += p[1];
        max_diff = max_diff.max(p[2]);
        max_ref = max_ref.max(p[3]);
        non_finite += p[4];
    }
    let non_finite = non_finite as usize;
    let rel = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        f64::INFINITY
    };
    let max_rel = if max_ref > 0.0 {
        max_diff / max_ref
    } else {
        f64::INFINITY
    };
    Comparison {
        rel_frobenius: if non_finite > 0 { f64::NAN } else { rel },
        max_rel,
        non_finite,
    }
}

/// Sum of squared differences, sum of squared references, largest difference, largest reference,
/// non-finite count of one chunk.
fn compare_part(ours: &[u16], reference: &[u16]) -> [f64; 5] {
    let (mut diff2, mut ref2, mut max_diff, mut max_ref, mut non_finite) =
        (0f64, 0f64, 0f64, 0f64, 0f64);
    for (&o, &r) in ours.iter().zip(reference) {
        let (o, r) = (bf16_to_f32(o) as f64, bf16_to_f32(r) as f64);
        if !o.is_finite() {
            non_finite += 1.0;
            continue;
        }
        let d = (o - r).abs();
        diff2 += d * d;
        ref2 += r * r;
        max_diff = max_diff.max(d);
        max_ref = max_ref.max(r.abs());
    }
    [diff2, ref2, max_diff, max_ref, non_finite]
}

/// Prints the first few elements where ours and cuBLAS disagree, with their coordinates, for debugging.
pub fn report_mismatches(ours: &[u16], reference: &[u16], n: usize) {
    let bad = ours
        .iter()
        .zip(reference)
        .enumerate()
        .filter(|(_, (&o, &r))| {
            let (o, r) = (bf16_to_f32(o), bf16_to_f32(r));
            !o.is_finite() || (o - r).abs() > 0.05 * r.abs().max(1.0)
        });
    let total = bad.clone().count();
    eprintln!(
        "  {total} of {} elements disagree with cuBLAS; first ones (row, col): ours vs cuBLAS",
        ours.len()
    );
    for (i, (&o, &r)) in bad.take(12) {
        eprintln!(
            "    ({}, {}): {} vs {}",
            i / n,
            i % n,
            bf16_to_f32(o),
            bf16_to_f32(r)
        );
    }
}

/// f64 dot products at `count` random entries (B `N × K`, or `K × N` when `b_kn`); returns (ours, cuBLAS) errors as max|x − ref| / rms(ref).
pub fn spot_check(
    (a_host, b_host, b_kn): (&[u16], &[u16], bool),
    ours: &[u16],
    reference: &[u16],
    (m, n, k): (usize, usize, usize),
    count: usize,
    seed: u64,
) -> (f64, f64) {
    let mut x = seed | 1;
    let mut next = |bound: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % bound as u64) as usize
    };
    let (mut e_ours, mut e_ref, mut sum2) = (0f64, 0f64, 0f64);
    for _ in 0..count {
        let (i, j) = (next(m), next(n));
        let exact: f64 = (0..k)
            .map(|p| {
                bf16_to_f32(a_host[i * k + p]) as f64
                    * bf16_to_f32(b_host[if b_kn { p * n + j } else { j * k + p }]) as f64
            })
            .sum();
        sum2 += exact * exact;
        let o = bf16_to_f32(ours[i * n + j]) as f64;
        let r = bf16_to_f32(reference[i * n + j]) as f64;
        e_ours = if o.is_finite() {
            e_ours.max((o - exact).abs())
        } else {
            f64::INFINITY
        };
        e_ref = e_ref.max((r - exact).abs());
    }
    let rms = (sum2 / count.max(1) as f64).sqrt().max(f64::MIN_POSITIVE);
    (e_ours / rms, e_ref / rms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip_and_rounding() {
        for x in [0.0f32, 1.0, -2.5, 3.140625, 1e-3, -65504.0] {
            let back = bf16_to_f32(f32_to_bf16(x));
            assert!((back - x).abs() <= x.abs() * 2f32.powi(-8), "{x} -> {back}");
        }
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), f32_to_bf16(1.0));
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn random_inputs_are_uniform_in_range() {
        let v = random_bf16(100_000, 7);
        let f: Vec<f64> = v.iter().map(|&h| bf16_to_f32(h) as f64).collect();
        assert!(f.iter().all(|x| (-1.0..=1.0).contains(x)));
        let mean = f.iter().sum::<f64>() / f.len() as f64;
        let var = f.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0 / 3.0).abs() < 0.01,
            "mean {mean} var {var}"
        );
    }

    #[test]
    fn compare_flags_poison_and_measures_error() {
        let a: Vec<u16> = [1.0f32, -2.0, 4.0]
            .iter()
            .map(|&x| f32_to_bf16(x))
            .collect();
        let mut b = a.clone();
        assert_eq!(compare(&b, &a).rel_frobenius, 0.0);
        b[1] = f32_to_bf16(-2.5);
        let c = compare(&b, &a);
        let expect = (0.25f64 / 21.0).sqrt();
        assert!((c.rel_frobenius - expect).abs() < 1e-12);
        b[2] = 0x7fc0;
        assert_eq!(compare(&b, &a).non_finite, 1);
    }
}
