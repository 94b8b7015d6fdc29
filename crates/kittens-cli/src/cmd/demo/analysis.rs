//! The hardware-analysis part of the demo: the catalog, the paper's bank claims, grid orders and the
//! planners, each computed live from the library (nothing here is a stored answer).

use super::Section;
use kittens_draw as draw;
use kittens_grid::{l2, regs, remap::GridOrder, tail};
use kittens_hw::{gpu, lds::DsInstr, mma};
use kittens_tile::{BaseShape, DType, Layout, RegTile, SharedTile, Swizzle};
use serde_json::{json, Value};

/// GPU catalog and matrix-instruction counts.
pub fn catalog(s: &mut Section) -> Value {
    s.line(format!(
        "{:<7} {:>5} {:>9} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9}",
        "gpu", "CUs", "XCDxCU", "LDS KiB", "L2 MiB", "LLC MiB", "HBM TB/s", "bf16 TF", "fp8 TF"
    ));
    for g in gpu::ALL {
        s.line(format!(
            "{:<7} {:>5} {:>9} {:>8} {:>9.0} {:>8} {:>8.2} {:>9.1} {:>9.1}",
            g.name,
            g.compute_units,
            format!("{}x{}", g.xcds, g.cus_per_xcd),
            g.shared_bytes_per_cu / 1024,
            (g.l2_bytes * g.l2_instances() as u64) as f64 / (1 << 20) as f64,
            g.llc_bytes >> 20,
            g.hbm_tbps,
            g.peak_bf16_tflops,
            g.peak_fp8_tflops
        ));
    }
    let instrs: Vec<&str> = mma::all().iter().map(|i| i.name).collect();
    s.line(format!(
        "{} matrix instructions with lane maps: {}",
        instrs.len(),
        instrs.join(", ")
    ));
    json!({ "gpus": gpu::ALL, "instructions": instrs })
}

/// HipKittens' bank-conflict claims (Fig. 4, D.1), recomputed from the phase table and the lane maps.
pub fn banks(s: &mut Section) -> anyhow::Result<Value> {
    let bf16 = DType::Bf16;
    let row16x32 = RegTile::new(bf16, 16, 32, Layout::Row, BaseShape::S16X32)?;
    let col16x32 = RegTile::new(bf16, 16, 32, Layout::Col, BaseShape::S16X32)?;
    let row16x16 = RegTile::new(bf16, 16, 16, Layout::Row, BaseShape::S16X16)?;
    let cases = [
        (
            "16x32 row, ds_read_b128, unswizzled",
            SharedTile::with_swizzle(bf16, 16, 32, Swizzle::None)?,
            row16x32,
            DsInstr::DsReadB128,
        ),
        (
            "16x32 row, ds_read_b128, Fig. 4 swizzle",
            SharedTile::new(bf16, 16, 32)?,
            row16x32,
            DsInstr::DsReadB128,
        ),
        (
            "16x32 col, ds_read_b64_tr_b16, Fig. 4 swizzle",
            SharedTile::new(bf16, 16, 32)?,
            col16x32,
            DsInstr::DsReadB64TrB16,
        ),
        (
            "16x16 row, ds_write_b64, unswizzled",
            SharedTile::with_swizzle(bf16, 16, 16, Swizzle::None)?,
            row16x16,
            DsInstr::DsWriteB64,
        ),
        (
            "16x16 row, ds_write_b64, D.1 swizzle",
            SharedTile::with_swizzle(bf16, 16, 16, Swizzle::DS_WRITE_B64_16X16)?,
            row16x16,
            DsInstr::DsWriteB64,
        ),
    ];
    let mut out = Vec::new();
    for (i, (label, shared, reg, instr)) in cases.into_iter().enumerate() {
        let r = kittens_tile::analyze(&shared, &reg, instr)?;
        let svg = s.picture(
            &format!("banks_{i}_{}.svg", instr.name()),
            kittens_tile::bank_svg(&r).as_bytes(),
        )?;
        s.line(format!(
            "{label:<48} max conflict {}-way   {svg}",
            r.max_conflict
        ));
        out.push(json!({ "case": label, "max_conflict": r.max_conflict, "svg": svg }));
    }
    Ok(Value::Array(out))
}

/// HipKittens Table 4 on the cache model, beside the paper's figures.
pub fn grid(s: &mut Section) -> anyhow::Result<Value> {
    let mi355x = gpu("mi355x")?;
    let rows: [(u64, GridOrder, (f64, f64, f64)); 6] = [
        (9216, GridOrder::RowMajor, (0.55, 0.95, 15.1)),
        (
            9216,
            GridOrder::XcdSwizzle {
                xcds: mi355x.xcds,
                window: 7,
                chunk: 216,
            },
            (0.79, 0.24, 14.9),
        ),
        (
            9216,
            GridOrder::XcdSwizzle {
                xcds: mi355x.xcds,
                window: 5,
                chunk: 25,
            },
            (0.75, 0.93, 18.3),
        ),
        (14592, GridOrder::RowMajor, (0.36, 0.76, 10.7)),
        (
            14592,
            GridOrder::XcdSwizzle {
                xcds: mi355x.xcds,
                window: 8,
                chunk: 542,
            },
            (0.79, 0.07, 13.9),
        ),
        (
            14592,
            GridOrder::XcdSwizzle {
                xcds: mi355x.xcds,
                window: 8,
                chunk: 64,
            },
            (0.78, 0.55, 16.6),
        ),
    ];
    s.line(format!(
        "{:<6} {:<14} {:>7} {:>7} {:>7}   paper: {:>5} {:>5} {:>6}",
        "size", "order", "L2 hit", "LLC hit", "Eq.1", "L2", "LLC", "TB/s"
    ));
    s.line(
        "(lockstep cache model; Eq. 1 with the L2/LLC bandwidths Table 4 implies, docs/grid.md)",
    );
    let mut out = Vec::new();
    for (size, order, paper) in rows {
        let shape = l2::GemmShape::bf16(size, size, size, (192, 256, 64));
        let r = l2::simulate(mi355x, &shape, order)?;
        let (rows, cols) = shape.grid();
        let first = draw::first_round(
            rows,
            cols,
            mi355x.xcds as u64,
            mi355x.compute_units as u64,
            order,
        )?;
        let (w, h, px) = draw::render_rgb(&first, 8)?;
        let label = order.label().replace(['/', ' '], "_").to_lowercase();
        let png = s.picture(
            &format!("grid_{size}_{label}.png"),
            &draw::encode_png(w, h, &px),
        )?;
        s.line(format!(
            "{:<6} {:<14} {:>6.1}% {:>6.1}% {:>7.1}   paper: {:>4.0}% {:>4.0}% {:>6.1}",
            size,
            order.label(),
            100.0 * r.l2_hit,
            100.0 * r.llc_hit,
            r.bandwidth_tbps_table4.unwrap_or(r.bandwidth_tbps),
            100.0 * paper.0,
            100.0 * paper.1,
            paper.2
        ));
        out.push(
            json!({ "size": size, "order": order.label(), "l2_hit": r.l2_hit, "llc_hit": r.llc_hit,
                         "bandwidth_tbps": r.bandwidth_tbps, "paper": paper, "png": png }),
        );
    }
    s.line(format!(
        "first dispatch round, one colour per XCD (HipKittens Fig. 5): {}/grid_*.png",
        s.pictures_dir()
    ));
    Ok(Value::Array(out))
}

/// The tail KV split (MI300X-attn §5.2) and the register budgets behind HipKittens Table 2.
pub fn planners(s: &mut Section) -> anyhow::Result<Value> {
    let mi300x = gpu("mi300x")?;
    let mut out = Vec::new();
    for (b, h, rows) in [(4, 16, 384), (1, 19, 256), (2, 24, 384)] {
        let input = tail::TailInput::new(b, h, 16384, 128, rows, 64);
        let p = tail::plan_tail(mi300x, &input, &tail::TailModel::SEED_001)?;
        s.line(format!(
            "tail split mi300x B={b} H={h} N=16384 rows={rows}: G={} ({})",
            p.split, p.reason
        ));
        out.push(json!({ "batch": b, "heads": h, "split": p.split, "speedup": p.speedup }));
    }
    let mi355x = gpu("mi355x")?;
    for (producers, consumers) in [(4, 8), (0, 8)] {
        let input = regs::RegsInput {
            producers,
            consumers,
            tile_m: 256,
            tile_n: 256,
            mma: (16, 16, 32),
            k_step: 32,
            reg_stages: 1,
            depth: 2,
            lds_k: 64,
            in_bytes: 2,
            overhead: 16,
        };
        let r = regs::plan_regs(mi355x, &input)?;
        s.line(format!(
            "regs mi355x {producers}P/{consumers}C 256x256 fp32 tile: {} ({})",
            if r.fits { "fits" } else { "does not fit" },
            r.reason
        ));
        out.push(json!({ "producers": producers, "consumers": consumers, "fits": r.fits }));
    }
    Ok(Value::Array(out))
}
