//! The LDS bank conflicts the ISA emulator measured on the code object's actual addresses, set beside
//! the static bank model of `kittens check --banks` (`kittens_ir::banks`), and where they differ.
//!
//! The static model covers the tile accesses of the hot loop, one row per IR access, named by the
//! instruction the lowering issues for it; the emulator sees every executed DS instruction by its
//! offset. They meet on the instruction mnemonic: for each one, the worst degree the model predicts
//! for the hot loop's accesses and the worst measured over the instructions executed. A measured
//! instruction is listed as differing when it conflicts more than the model's worst for its mnemonic,
//! or when the model has no access with that mnemonic (register remaps through LDS scratch, the
//! compiler's own LDS accesses, accesses outside the hot loop); a mnemonic the model predicts
//! conflicted that measured conflict-free is listed too.

use kittens_amdsim::exec::Stats;
use kittens_hw::Arch;
use kittens_ir::Kernel;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The mnemonic of a decoded instruction's text (`ds_read_b128 v[0:3], v4` → `ds_read_b128`).
fn mnemonic(text: &str) -> &str {
    text.split_whitespace().next().unwrap_or("")
}

/// The comparison as JSON: `static` (the hot loop's modelled accesses), `by_instruction` (per
/// mnemonic: the model's worst and the measured worst), `differ` (what disagrees, and why).
pub(crate) fn compare(kernel: &Kernel, arch: Arch, stats: &Stats) -> Value {
    let plan = match kittens_ir::banks::plan(kernel, arch) {
        Ok(p) => p,
        Err(e) => return json!({ "static": null, "why": e.to_string() }),
    };
    let hot = plan.hot();
    let mut model: BTreeMap<&str, Option<u32>> = BTreeMap::new();
    for a in &hot {
        if let Some(instr) = a.instr {
            let e = model.entry(instr).or_insert(None);
            *e = match (*e, a.max_conflict) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
        }
    }
    let mut measured: BTreeMap<&str, u32> = BTreeMap::new();
    for d in stats.ds.values() {
        if let Some(w) = d.worst_degree {
            let e = measured.entry(mnemonic(&d.text)).or_insert(0);
            *e = (*e).max(w);
        }
    }
    let mut differ = Vec::new();
    for d in stats.ds.values() {
        let (Some(w), m) = (d.worst_degree, mnemonic(&d.text)) else {
            continue;
        };
        match model.get(m).copied().flatten() {
            Some(s) if w > s => differ.push(json!({
                "offset": d.offset, "text": d.text, "measured": w, "model": s,
                "why": format!("measured {w}-way; the model's worst for the hot loop's {m} accesses is {s}-way"),
            })),
            None if w > 1 => differ.push(json!({
                "offset": d.offset, "text": d.text, "measured": w, "model": null,
                "why": format!("measured {w}-way; the model has no hot-loop tile access issued as {m} (a register remap through LDS scratch, or outside the hot loop)"),
            })),
            _ => {}
        }
    }
    for (m, s) in &model {
        if let (Some(s), Some(&w)) = (s, measured.get(m)) {
            if *s > 1 && w < *s {
                differ.push(json!({
                    "instruction": m, "measured": w, "model": s,
                    "why": format!("the model predicts {s}-way for a hot-loop {m} access; the worst measured is {w}-way"),
                }));
            }
        }
    }
    let by_instruction: BTreeMap<&str, Value> = model
        .keys()
        .chain(measured.keys())
        .map(|m| {
            (
                *m,
                json!({ "model": model.get(m).copied().flatten(), "measured": measured.get(m) }),
            )
        })
        .collect();
    let rows: Vec<Value> = hot
        .iter()
        .map(|a| json!({ "access": a.access, "instr": a.instr, "max_conflict": a.max_conflict }))
        .collect();
    json!({ "static": rows, "by_instruction": by_instruction, "differ": differ })
}
