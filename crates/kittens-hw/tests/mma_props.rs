//! Structural properties every map must have, whatever its source: each map is a bijection
//! between (lane, slot) and the operand's elements; simulating one instruction through the maps
//! gives the plain matrix product; register counts and cycle counts follow from the data.

use kittens_hw::mma::{self, Entry, MmaInstr, Operand};
use kittens_hw::{gpu, Arch};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::collections::HashMap;

/// (row, col) → (lane, slot), asserting each element is held exactly once.
fn owners(i: &MmaInstr, op: Operand) -> HashMap<(u32, u32), (u32, u32)> {
    let map = i.map(op);
    let (rows, cols) = i.rows_cols(op);
    assert_eq!(
        map.len() as u32,
        rows * cols,
        "{} {op}: entry count",
        i.name
    );
    let mut owner = HashMap::new();
    for Entry {
        lane,
        slot,
        row,
        col,
    } in map
    {
        assert!(
            lane < i.lanes && slot < i.elems_per_lane(op),
            "{} {op}: ({lane},{slot}) out of range",
            i.name
        );
        assert!(
            row < rows && col < cols,
            "{} {op}: ({row},{col}) outside {rows}x{cols}",
            i.name
        );
        let prev = owner.insert((row, col), (lane, slot));
        assert!(prev.is_none(), "{} {op}: ({row},{col}) held twice", i.name);
    }
    owner
}

#[test]
fn every_map_is_a_bijection() {
    for i in mma::all() {
        for op in Operand::ALL {
            if i.has_register_layout(op) {
                let owner = owners(i, op);
                // Distinct (lane, slot) pairs as well: the inverse is a function too.
                let mut seen: Vec<_> = owner.values().copied().collect();
                seen.sort();
                seen.dedup();
                assert_eq!(seen.len(), owner.len(), "{} {op}", i.name);
            }
        }
    }
}

/// Scatter random A and B into per-lane registers with the maps, evaluate `D = A·B + C` the way
/// the instruction does (each D register of each lane reads its A row and B column out of the
/// lanes that hold them), gather D back with D's map, and compare with the f64 product.
#[test]
fn simulated_instruction_equals_the_matrix_product() {
    let mut rng = SmallRng::seed_from_u64(0x6b69_7474);
    for i in mma::all() {
        let (m, n, k) = (i.m as usize, i.n as usize, i.k as usize);
        let a: Vec<f64> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f64> = (0..k * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let c: Vec<f64> = (0..m * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let regs = |op: Operand, mat: &[f64], ld: usize| {
            let mut r = vec![vec![f64::NAN; i.elems_per_lane(op) as usize]; i.lanes as usize];
            for e in i.map(op) {
                r[e.lane as usize][e.slot as usize] = mat[e.row as usize * ld + e.col as usize];
            }
            r
        };
        let ra = regs(Operand::A, &a, k);
        let rc = regs(Operand::D, &c, n);
        let own_a = owners(i, Operand::A);
        // B as the instruction sees it: read back out of the lanes that hold it, or, for wgmma,
        // straight from the matrix (its B comes from shared memory).
        let bt: Vec<f64> = if i.has_register_layout(Operand::B) {
            let rb = regs(Operand::B, &b, n);
            let own_b = owners(i, Operand::B);
            (0..k * n)
                .map(|x| {
                    let (l, s) = own_b[&((x / n) as u32, (x % n) as u32)];
                    rb[l as usize][s as usize]
                })
                .collect()
        } else {
            b.clone()
        };
        let mut rd = rc.clone();
        for e in i.map(Operand::D) {
            let mut acc = rc[e.lane as usize][e.slot as usize];
            for kk in 0..k as u32 {
                let (l, s) = own_a[&(e.row, kk)];
                acc += ra[l as usize][s as usize] * bt[kk as usize * n + e.col as usize];
            }
            rd[e.lane as usize][e.slot as usize] = acc;
        }
        let mut d = vec![f64::NAN; m * n];
        for e in i.map(Operand::D) {
            d[e.row as usize * n + e.col as usize] = rd[e.lane as usize][e.slot as usize];
        }
        for r in 0..m {
            for col in 0..n {
                let want: f64 =
                    c[r * n + col] + (0..k).map(|x| a[r * k + x] * b[x * n + col]).sum::<f64>();
                let got = d[r * n + col];
                assert!(
                    (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                    "{}: D[{r}][{col}] {got} vs {want}",
                    i.name
                );
            }
        }
    }
}

#[test]
fn flops_follow_from_the_shape_and_registers_from_the_dtype() {
    for i in mma::all() {
        assert_eq!(
            i.flops,
            2 * (i.m * i.n * i.k * i.blocks) as u64,
            "{}",
            i.name
        );
        for op in Operand::ALL {
            let bits = i.elems_per_lane(op) * i.dtype(op).bits();
            assert_eq!(
                i.regs_per_lane(op) * 32,
                bits.next_multiple_of(32),
                "{} {op}",
                i.name
            );
        }
    }
}

/// Issue cycles × peak rate: `flops · SIMDs · CUs · clock / cycles` must give the vendor peak
/// recorded in the GPU catalog (within 1 %), for the bf16 and fp8 instructions of each AMD arch —
/// except a CDNA3 instruction CDNA4 keeps (`v_mfma_f32_16x16x16_bf16`, not one of its double-rate
/// forms), whose CDNA4 entry carries CDNA3's cycles.
#[test]
fn cycles_reproduce_the_catalog_peak_rates() {
    for (arch, name) in [(Arch::Cdna3, "mi300x"), (Arch::Cdna4, "mi355x")] {
        let g = gpu(name).expect("catalog GPU");
        for i in mma::all().iter().filter(|i| i.arch == arch) {
            if let Some(c3) = mma::instr_on(i.name, Arch::Cdna3).filter(|_| arch == Arch::Cdna4) {
                assert_eq!(i.cycles, c3.cycles, "{}", i.name);
                continue;
            }
            let peak = match i.a_dtype {
                kittens_hw::dtype::DType::Bf16 | kittens_hw::dtype::DType::F16 => {
                    g.peak_bf16_tflops
                }
                d if d.is_fp8() => g.peak_fp8_tflops,
                _ => continue,
            };
            let cycles = i.cycles.expect("AMD entries have cycles") as f64;
            let tflops = i.flops as f64
                * (g.simds_per_cu * g.compute_units) as f64
                * g.clock_mhz as f64
                * 1e6
                / cycles
                / 1e12;
            assert!(
                (tflops / peak - 1.0).abs() < 0.01,
                "{}: {tflops:.1} TFLOP/s vs {name} peak {peak}",
                i.name
            );
        }
    }
}

#[test]
fn lookups_and_errors() {
    assert_eq!(
        mma::default_bf16(Arch::Cdna3).name,
        "v_mfma_f32_16x16x16_bf16"
    );
    assert_eq!(
        mma::default_bf16(Arch::Cdna4).name,
        "v_mfma_f32_16x16x32_bf16"
    );
    assert_eq!(mma::default_bf16(Arch::Hopper).lanes, 32);
    for arch in [Arch::Cdna3, Arch::Cdna4, Arch::Hopper] {
        let d = mma::default_bf16(arch);
        let smallest = mma::all()
            .iter()
            .filter(|i| i.arch == arch && i.a_dtype == d.a_dtype)
            .map(|i| i.m * i.n)
            .min();
        assert_eq!(Some(d.m * d.n), smallest, "{arch:?}");
    }
    let err = mma::instr("v_mfma_nope").unwrap_err().to_string();
    assert!(
        err.contains("v_mfma_f32_32x32x8_bf16") && err.contains("wgmma"),
        "{err}"
    );
    assert_eq!("c".parse::<Operand>(), Ok(Operand::D));
    assert!("x".parse::<Operand>().is_err());
    let w = mma::instr("wgmma.m64n256k16.f32.bf16.bf16").unwrap();
    assert!(w.try_map(Operand::B).is_err());
    assert_eq!(w.elems_per_lane(Operand::D), 128);
    assert!(mma::wgmma_accumulator(12).is_err());
    assert_eq!(mma::wgmma_accumulator(256).unwrap(), w.map(Operand::D));
}
