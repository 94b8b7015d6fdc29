//! `kittens layout`: the lane/register ↔ element map of one matrix instruction operand, from
//! `kittens_hw::mma` (closed-form maps; CDNA3 ones equal AMD's Matrix Instruction Calculator).
//!
//! `--json` prints `{"instruction", "matrix", "entries": [{"lane", "slot", "row", "col"}, ...]}`
//! with entries lane-major, `slot` counting the lane's elements in register order (low half of
//! the first register first), the order of `crates/kittens-hw/tests/data/cdna3_mfma_layouts.json`.

use anyhow::{bail, Context};
use kittens_hw::mma::{self, Entry, MmaInstr, Operand};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Instruction name, e.g. v_mfma_f32_16x16x16_bf16 (see --list).
    pub instruction: Option<String>,
    /// Operand: a (M×K), b (K×N), c or d (M×N).
    #[arg(long, short = 'm', default_value = "d")]
    pub matrix: String,
    /// List the instructions in the catalog instead (not with an instruction or --matrix).
    #[arg(long, conflicts_with_all = ["instruction", "matrix"])]
    pub list: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document of one operand map.
#[derive(Serialize)]
struct LayoutDoc {
    instruction: &'static str,
    matrix: String,
    entries: Vec<Entry>,
}

/// Builds the map document; `matrix` is echoed as given (lower-cased), so `c` stays `c`.
fn layout_doc(name: &str, matrix: &str) -> anyhow::Result<(LayoutDoc, &'static MmaInstr, Operand)> {
    let instr = mma::instr(name)?;
    let op: Operand = matrix.parse()?;
    let entries = instr.try_map(op)?;
    Ok((
        LayoutDoc {
            instruction: instr.name,
            matrix: matrix.to_ascii_lowercase(),
            entries,
        },
        instr,
        op,
    ))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.list {
        return list(args.json);
    }
    let Some(name) = args.instruction.as_deref() else {
        bail!("name an instruction (or pass --list); known: {}", known());
    };
    let (doc, instr, op) = layout_doc(name, &args.matrix)
        .with_context(|| format!("kittens layout {name} --matrix {}", args.matrix))?;
    if args.json {
        println!("{}", serde_json::to_string(&doc)?);
    } else {
        print_human(instr, op, &doc.entries);
    }
    Ok(())
}

fn known() -> String {
    mma::all()
        .iter()
        .map(|i| i.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(json: bool) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({ "instructions": mma::all() }))?
        );
        return Ok(());
    }
    println!(
        "{:<54} {:<7} {:>12} {:<28} {:>5} {:>7} {:>6}",
        "instruction", "arch", "MxNxK", "A,B -> acc", "lanes", "flops", "cycles"
    );
    for i in mma::all() {
        let shape = format!("{}x{}x{}", i.m, i.n, i.k);
        let types = format!("{},{} -> {}", i.a_dtype, i.b_dtype, i.acc_dtype);
        let cycles = i.cycles.map_or("-".to_string(), |c| c.to_string());
        println!(
            "{:<54} {:<7} {:>12} {:<28} {:>5} {:>7} {:>6}",
            i.name,
            i.arch.target(),
            shape,
            types,
            i.lanes,
            i.flops,
            cycles
        );
    }
    Ok(())
}

fn print_human(instr: &MmaInstr, op: Operand, entries: &[Entry]) {
    let (rows, cols) = instr.rows_cols(op);
    let per_lane = instr.elems_per_lane(op);
    println!(
        "{} ({}), operand {}: {}x{} {}, {} lanes x {} elements = {} registers per lane ({} per register)",
        instr.name,
        instr.arch.target(),
        op.name().to_uppercase(),
        rows,
        cols,
        instr.dtype(op),
        instr.lanes,
        per_lane,
        instr.regs_per_lane(op),
        instr.elems_per_reg(op),
    );
    println!("source: {}", instr.source);
    if !instr.note.is_empty() {
        println!("note: {}", instr.note);
    }
    println!("\nlane: (row,col) for slot 0, 1, ...");
    for lane_entries in entries.chunks(per_lane as usize) {
        let cells: Vec<String> = lane_entries
            .iter()
            .map(|e| format!("({},{})", e.row, e.col))
            .collect();
        println!("{:>4}: {}", lane_entries[0].lane, cells.join(" "));
    }
    println!("\nowning lane of each element (rows down, columns across):");
    print_grid(rows, cols, entries, instr.lanes);
}

/// One cell per element, holding the lane that owns it.
fn print_grid(rows: u32, cols: u32, entries: &[Entry], lanes: u32) {
    let width = (lanes - 1).to_string().len();
    let mut owner = vec![0u32; (rows * cols) as usize];
    for e in entries {
        owner[(e.row * cols + e.col) as usize] = e.lane;
    }
    for r in 0..rows {
        let line: Vec<String> = (0..cols)
            .map(|c| format!("{:>width$}", owner[(r * cols + c) as usize]))
            .collect();
        println!("{:>4}| {}", r, line.join(" "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The `--json` document equals the oracle's list, in order, for every CDNA3 instruction and
    /// operand in `crates/kittens-hw/tests/data/cdna3_mfma_layouts.json` (AMD's calculator output).
    #[test]
    fn json_output_equals_the_oracle() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../kittens-hw/tests/data/cdna3_mfma_layouts.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "CDNA3 layout oracle missing at {} ({e}); this test does not skip",
                path.display()
            )
        });
        let oracle: serde_json::Value = serde_json::from_str(&text).expect("oracle is JSON");
        let instrs = oracle["instructions"]
            .as_object()
            .expect("oracle has `instructions`");
        assert!(!instrs.is_empty());
        for (name, spec) in instrs {
            for m in ["a", "b", "d"] {
                let (doc, _, _) = layout_doc(name, m).unwrap();
                let ours: serde_json::Value = serde_json::to_value(&doc).unwrap();
                assert_eq!(ours["instruction"], serde_json::json!(name));
                assert_eq!(ours["matrix"], serde_json::json!(m));
                let as_quads: Vec<[u64; 4]> = ours["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| ["lane", "slot", "row", "col"].map(|k| e[k].as_u64().unwrap()))
                    .collect();
                let theirs: Vec<[u64; 4]> =
                    serde_json::from_value(spec[m.to_uppercase()].clone()).unwrap();
                assert_eq!(as_quads, theirs, "{name} {m}");
            }
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = layout_doc("v_mfma_bogus", "a").err().unwrap().to_string();
        assert!(err.contains("v_mfma_f32_16x16x16_bf16"), "{err}");
        assert!(layout_doc("v_mfma_f32_16x16x16_bf16", "q").is_err());
        assert!(layout_doc("wgmma.m64n256k16.f32.bf16.bf16", "b").is_err());
        assert_eq!(
            layout_doc("v_mfma_f32_16x16x16_bf16", "C")
                .unwrap()
                .0
                .matrix,
            "c"
        );
    }
}
