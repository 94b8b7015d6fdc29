//! `kittens banks`: the shared-memory bank conflicts of moving one tile between shared memory and
//! registers with one instruction, phase by phase (HipKittens §3.2.2, D.1, Table 5).

use anyhow::{anyhow, Context};
use kittens_hw::lds::DsInstr;
use kittens_tile::{
    analyze, bank_svg, base_shapes, BankReport, BaseShape, DType, Layout, RegTile, SharedTile,
    Swizzle,
};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Shared-memory instruction: ds_read_b128, ds_read_b96, ds_read_b64, ds_write_b64, ds_write_b128, ds_read_u16, ds_read_b64_tr_b16,
    /// ld.shared.b32, ld.shared.v2.b32, ld.shared.v4.b32, ldmatrix.
    #[arg(long)]
    pub instr: DsInstr,
    /// Tile shape ROWSxCOLS, used for both the shared and the register tile.
    #[arg(long, default_value = "16x32")]
    pub tile: String,
    /// Element type (bf16, f16, f32, fp8...).
    #[arg(long, default_value = "bf16")]
    pub dtype: DType,
    /// Register layout: row or col.
    #[arg(long, default_value = "row")]
    pub layout: Layout,
    /// none, default (the shape's default), hk16x32 (HipKittens Fig. 4), hk16x16 (D.1's ds_write_b64 swizzle),
    /// hk32x32, hk32x16, nv128, nv64, nv32, or xor(bits,base,shift).
    #[arg(long, default_value = "default")]
    pub swizzle: String,
    /// Base (matrix-instruction operand) shape ROWSxCOLS of the register tile; default: the largest one of the
    /// instruction's vendor that divides the tile and that the instruction can move.
    #[arg(long)]
    pub base: Option<String>,
    /// Write the bank picture (like HipKittens Fig. 4 / Fig. 20) to this SVG file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_shape(s: &str) -> anyhow::Result<(u32, u32)> {
    let (r, c) = s
        .to_ascii_lowercase()
        .split_once('x')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| anyhow!("shape `{s}` must look like 16x32"))?;
    let parse = |v: &str| {
        v.trim()
            .parse::<u32>()
            .with_context(|| format!("shape `{s}`: `{v}` is not a number"))
    };
    Ok((parse(&r)?, parse(&c)?))
}

fn shared_tile(dtype: DType, rows: u32, cols: u32, swizzle: &str) -> anyhow::Result<SharedTile> {
    let tile = if swizzle.eq_ignore_ascii_case("default") {
        SharedTile::new(dtype, rows, cols)
    } else {
        let sw = Swizzle::parse(swizzle).ok_or_else(|| {
            anyhow!("unknown swizzle `{swizzle}`; use none, default, hk16x32, hk16x16, hk32x32, hk32x16, nv128, nv64, nv32 or xor(bits,base,shift) (bits 1 to 8, shift at least 1, bits + base + shift at most 31; two terms joined by `+`)")
        })?;
        SharedTile::with_swizzle(dtype, rows, cols, sw)
    };
    Ok(tile?)
}

/// Analyze with the given base shape, or with the first candidate that works.
fn run_analysis(
    args: &Args,
    instr: DsInstr,
    shared: &SharedTile,
    layout: Layout,
) -> anyhow::Result<BankReport> {
    let (dtype, rows, cols) = (shared.dtype, shared.rows, shared.cols);
    let bases = match &args.base {
        Some(b) => {
            let (r, c) = parse_shape(b)?;
            vec![BaseShape::new(r, c)]
        }
        None => base_shapes(dtype, layout, instr.info().vendor)
            .into_iter()
            .filter(|b| rows % b.rows == 0 && cols % b.cols == 0)
            .collect(),
    };
    let mut first_err = None;
    for base in bases {
        let attempt = RegTile::new(dtype, rows, cols, layout, base)
            .and_then(|reg| analyze(shared, &reg, instr));
        match attempt {
            Ok(r) => return Ok(r),
            Err(e) => {
                first_err.get_or_insert(anyhow!(e).context(format!("base shape {base}")));
            }
        }
    }
    Err(first_err.unwrap_or_else(|| {
        anyhow!(
            "no {} base shape of {dtype} divides a {rows}x{cols} tile",
            layout
        )
    }))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let instr = args.instr;
    let (rows, cols) = parse_shape(&args.tile)?;
    let (dtype, layout) = (args.dtype, args.layout);
    let shared = shared_tile(dtype, rows, cols, &args.swizzle).context("shared tile")?;
    let report = run_analysis(&args, instr, &shared, layout)
        .with_context(|| format!("{instr} of a {rows}x{cols} {dtype} {layout}-layout tile"))?;
    if let Some(path) = &args.svg {
        std::fs::write(path, bank_svg(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&report))?);
    } else {
        print_human(&report);
    }
    Ok(())
}

fn to_json(r: &BankReport) -> serde_json::Value {
    json!({
        "instruction": r.instr.name(),
        "tile": format!("{}x{}", r.reg.rows, r.reg.cols),
        "dtype": r.reg.dtype.name(),
        "layout": r.reg.layout.name(),
        "swizzle": r.shared.swizzle.name(),
        "swizzle_detail": r.shared.swizzle,
        "base": r.reg.base.to_string(),
        "lane_map": {"instruction": r.lane_map.0, "operand": r.lane_map.1},
        "banks": r.instr.info().banks,
        "phase_source": r.instr.info().source,
        "instructions_issued": r.issues.len(),
        "max_conflict": r.max_conflict,
        "phases": r.phases.iter().map(|p| json!({
            "instruction": p.instruction,
            "phase": p.phase,
            "lanes": p.lanes,
            "addresses": p.lanes.iter().map(|&l| r.issues[p.instruction as usize].addrs[l as usize]).collect::<Vec<_>>(),
            "conflict": p.conflict,
        })).collect::<Vec<_>>(),
    })
}

/// Lanes as compact ranges: 0-3,12-15,20-27.
fn ranges(lanes: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lanes.len() {
        let mut j = i;
        while j + 1 < lanes.len() && lanes[j + 1] == lanes[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            lanes[i].to_string()
        } else {
            format!("{}-{}", lanes[i], lanes[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn print_human(r: &BankReport) {
    let info = r.instr.info();
    println!(
        "{} moving a {}x{} {} {}-layout register tile (base {}, lane map: {} operand {}) from a shared tile with swizzle {}",
        info.name,
        r.reg.rows,
        r.reg.cols,
        r.reg.dtype,
        r.reg.layout,
        r.reg.base,
        r.lane_map.0,
        r.lane_map.1,
        r.shared.swizzle.name()
    );
    println!(
        "{} banks of 4 bytes, {} phases per instruction ({}); {} instruction(s) issued",
        info.banks,
        info.phases.len(),
        info.source,
        r.issues.len()
    );
    println!(
        "{:>5} {:>5}  {:<24} {:>8}",
        "instr", "phase", "lanes", "conflict"
    );
    for p in &r.phases {
        println!(
            "{:>5} {:>5}  {:<24} {:>7}-way",
            p.instruction,
            p.phase,
            ranges(&p.lanes),
            p.conflict
        );
    }
    println!("max conflict: {}-way", r.max_conflict);
    if r.max_conflict > 1 {
        println!("(N-way: a bank serves N distinct 4-byte words in one phase, so that phase takes N cycles)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_ranges_compact() {
        assert_eq!(ranges(&[0, 1, 2, 3, 12, 13, 14, 15, 20]), "0-3,12-15,20");
        assert_eq!(parse_shape("16x32").unwrap(), (16, 32));
        assert!(parse_shape("16by32").is_err());
    }

    fn args(swizzle: &str) -> Args {
        Args {
            instr: DsInstr::DsReadB128,
            tile: "16x32".into(),
            dtype: DType::Bf16,
            layout: Layout::Row,
            swizzle: swizzle.into(),
            base: None,
            svg: None,
            json: true,
        }
    }

    /// The paper's example (HipKittens Fig. 4) through `--json`: 16x32 bf16 row, ds_read_b128: 2-way
    /// unswizzled, 1 with the default.
    #[test]
    fn done_when_json() {
        for (sw, want) in [("none", 2), ("default", 1)] {
            let a = args(sw);
            let shared = shared_tile(DType::Bf16, 16, 32, &a.swizzle).unwrap();
            let r = run_analysis(&a, DsInstr::DsReadB128, &shared, Layout::Row).unwrap();
            let j = to_json(&r);
            assert_eq!(j["max_conflict"], want, "{sw}");
            assert_eq!(j["phases"].as_array().unwrap().len(), 4);
        }
    }
}
