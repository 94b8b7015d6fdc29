//! The registry's `gemm_bf16` on both CDNA targets with leading dimensions (`GemmConfig::strided`: A, B
//! and C slices of bigger matrices, `lda, ldb, ldc` kernel parameters): the lowered HIP compiled without
//! spills by the AMD clangs, and run on the host emulation (`kittens_runtime::amd::emulate`) against an
//! f64 product at a size with partial blocks, the padding between rows holding random values the
//! kernel must not read and NaN it must not overwrite. A stored transposed is refused by name on these
//! schedules (their MFMAs take K-major register operands).

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::assert_compiles_without_spills;
use kittens_hw::Target;
use kittens_kernels::gemm::{build, ALayout, GemmConfig};
use kittens_runtime::amd::emulate::{Emulator, HostTensor};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn bf16(x: f32) -> u16 {
    let u = x.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

fn f32_of(h: u16) -> f64 {
    f32::from_bits((h as u32) << 16) as f64
}

fn bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn strided_gemm_on_both_cdna_targets() {
    let (m, n, k) = (300, 264, 72);
    let (lda, ldb, ldc) = (k + 24, k + 8, n + 40);
    for (gpu, target) in [("mi355x", Target::Gfx950), ("mi325x", Target::Gfx942)] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let cfg = GemmConfig {
            strided: true,
            ..GemmConfig::for_gpu(g)
        };
        let kernel = build(&cfg).unwrap();
        assert_compiles_without_spills(&kernel, target, "strided gemm_bf16");
        let emu = Emulator::build(&kernel, g.arch).expect("lowers and compiles for the host");
        let mut rng = SmallRng::seed_from_u64(7);
        let mut gen = |len: usize| -> Vec<u16> {
            (0..len)
                .map(|_| bf16(rng.gen_range(-1.0f32..1.0)))
                .collect()
        };
        let (a, b) = (gen((m - 1) * lda + k), gen((n - 1) * ldb + k));
        let c_len = (m - 1) * ldc + n;
        let mut t = vec![
            HostTensor::Data(bytes(&a)),
            HostTensor::Data(bytes(&b)),
            HostTensor::Data(bytes(&vec![0x7fc0; c_len])),
        ];
        let params = [m, n, k, lda, ldb, ldc].map(|x| x as i64);
        emu.run(&params, &mut t, None)
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let HostTensor::Data(c) = &t[2] else {
            unreachable!()
        };
        let c: Vec<u16> = c
            .chunks(2)
            .map(|p| u16::from_le_bytes([p[0], p[1]]))
            .collect();
        let (mut d2, mut r2) = (0f64, 0f64);
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k)
                    .map(|p| f32_of(a[i * lda + p]) * f32_of(b[j * ldb + p]))
                    .sum();
                let got = f32_of(c[i * ldc + j]);
                d2 += (got - r) * (got - r);
                r2 += r * r;
            }
            if i + 1 < m {
                let gap = &c[i * ldc + n..(i + 1) * ldc];
                assert!(
                    gap.iter().all(|&x| x == 0x7fc0),
                    "{target}: row {i}'s gap written"
                );
            }
        }
        let e = (d2 / r2).sqrt();
        eprintln!("{target}: rel_err {e:.3e}");
        // bf16 output rounding shows (2^-9 per element); an indexing error is of order 1.
        assert!(e > 1e-4 && e < 4e-3, "{target}: rel_err {e}");
    }
}

#[test]
fn transposed_a_is_refused_on_the_cdna_schedules() {
    for gpu in ["mi355x", "mi325x"] {
        let cfg = GemmConfig {
            a_layout: ALayout::Km,
            ..GemmConfig::for_gpu(kittens_hw::gpu(gpu).unwrap())
        };
        let e = build(&cfg).unwrap_err().to_string();
        assert!(e.contains("K x M") && e.contains("K-major"), "{gpu}: {e}");
    }
}
