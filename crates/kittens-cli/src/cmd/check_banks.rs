//! `kittens check <kernel> --gpu <amd gpu> --banks`: every shared-memory access of the hot loop, the
//! instruction the HIP lowering issues for it, the swizzle the bank solver chose for its buffer and the
//! worst bank conflict of its phases (`kittens_ir::banks`; the bank model is `kittens_hw::lds`).

use anyhow::{bail, Context};
use kittens_ir::{banks, Kernel};
use serde_json::json;

pub fn run(
    kernel: &Kernel,
    gpu: Option<&'static kittens_hw::Gpu>,
    as_json: bool,
) -> anyhow::Result<()> {
    let Some(gpu) = gpu else {
        bail!("--banks needs an AMD --gpu (e.g. --gpu mi355x or --gpu mi300x): the instructions and swizzles are per target");
    };
    if !gpu.arch.is_amd() {
        bail!(
            "--banks: {} is not an AMD GPU; the bank solver chooses LDS swizzles for the HIP lowering (gfx942, gfx950)",
            gpu.name
        );
    }
    let plan = banks::plan(kernel, gpu.arch)
        .with_context(|| format!("choosing swizzles for {}", kernel.name))?;
    let hot = plan.hot();
    if as_json {
        let rows: Vec<_> = hot
            .iter()
            .map(|a| {
                json!({
                    "access": a.access,
                    "op": a.op,
                    "instr": a.instr,
                    "swizzle": a.swizzle,
                    "max_conflict": a.max_conflict,
                })
            })
            .collect();
        let doc = json!({
            "kernel": plan.kernel,
            "gpu": gpu.name,
            "target": plan.target,
            "banks": rows,
            "tiles": plan.tiles,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{} on {} ({}): shared tiles and their solved swizzles",
        plan.kernel, gpu.name, plan.target
    );
    for t in &plan.tiles {
        println!(
            "  {:<10} declared {:<24} chosen {}",
            t.buffer, t.declared, t.chosen
        );
    }
    println!("hot-loop shared accesses:");
    println!(
        "  {:<36} {:<20} {:<28} worst",
        "access", "instruction", "swizzle"
    );
    for a in hot {
        let worst = a
            .max_conflict
            .map_or("unmodelled".to_string(), |d| format!("{d}-way"));
        println!(
            "  {:<36} {:<20} {:<28} {worst}",
            a.access,
            a.instr.unwrap_or("(none in the model)"),
            a.swizzle
        );
    }
    Ok(())
}
