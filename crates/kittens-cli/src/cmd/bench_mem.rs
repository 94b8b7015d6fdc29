//! `kittens bench layernorm|rotary`: the strip programs lowered for sm_90a, timed at several
//! configurations per shape in one run, with the copy bandwidth measured in the same run
//! (`kittens_runtime::cuda::bench_mem`). The comparison with PyTorch eager and `torch.compile` is the
//! Python package's (`python -m kittens.bench layernorm|rotary`); this sweep is how the default
//! configurations were chosen. The first row of each shape is the registry's default configuration.

use anyhow::{bail, Context};
use kittens_hw::Target;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::layernorm::{self, LayerNormConfig};
use kittens_kernels::rotary::{self, RotaryConfig, RotaryRows};
use kittens_runtime::cuda::bench_mem::{run_strip_sweep, StripCase};

use super::bench_args::Args;

fn dims(s: &str, n: usize) -> anyhow::Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split('x')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("shape `{s}`"))?;
    if v.len() != n || v.contains(&0) {
        bail!("shape `{s}` needs {n} positive sizes joined by x");
    }
    Ok(v)
}

fn lower(k: anyhow::Result<kittens_ir::Kernel>) -> anyhow::Result<kittens_codegen::Lowered> {
    Ok(kittens_codegen::lower(&k?, Target::Sm90a)?)
}

fn layernorm_cases(shapes: &str, p: f32) -> anyhow::Result<Vec<StripCase>> {
    let gpu = kittens_hw::gpu("h100")?;
    let mut cases = Vec::new();
    for s in shapes.split(',').filter(|s| !s.is_empty()) {
        let v = dims(s, 2)?;
        let (rows, d) = (v[0], v[1]);
        let dim = u32::try_from(d)?;
        let default = LayerNormConfig::for_gpu(gpu, dim, p);
        let mut cfgs = vec![default];
        for w in [1u32, 2, 4, 8, 16] {
            for waves in [w.max(4), 2 * w.max(4)] {
                let c = LayerNormConfig {
                    waves_per_row: w,
                    waves,
                    ..default
                };
                // At most 64 values per lane (more spills) and 1024 threads per block.
                if c.slice() / c.lanes <= 64 && waves <= 32 && !cfgs.contains(&c) {
                    cfgs.push(c);
                }
            }
        }
        let bytes = 4 * rows as u64 * d as u64 * 2 + 4 * d as u64;
        let [s0, s1] = layernorm::problem::words(0x5eed_2a2a_0123_4567);
        for c in cfgs {
            cases.push(StripCase {
                label: format!(
                    "rows={rows} D={d} p={p} waves/row={} waves={} ({} per lane)",
                    c.waves_per_row,
                    c.waves,
                    c.slice() / c.lanes
                ),
                lowered: lower(layernorm::build(&c).map_err(Into::into))?,
                params: vec![
                    ("rows".into(), i64::try_from(rows)?),
                    ("seed_lo".into(), s0),
                    ("seed_hi".into(), s1),
                    ("offset_lo".into(), 7),
                    ("offset_hi".into(), 0),
                ],
                bytes,
            });
        }
    }
    Ok(cases)
}

fn rotary_cases(shapes: &str) -> anyhow::Result<Vec<StripCase>> {
    let mut cases = Vec::new();
    for s in shapes.split(',').filter(|s| !s.is_empty()) {
        let v = dims(s, 4)?;
        let (b, h, n, d) = (v[0], v[1], v[2], v[3]);
        let dim = u32::try_from(d)?;
        let mut cfgs = Vec::new();
        for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
            for interleaved in [false, true] {
                let default = RotaryConfig::new(dim, layout, interleaved);
                cfgs.push(default);
                // Heads along the rows (a power-of-two D) at 4-16 heads and 4 or 8 waves per
                // block; positions along the rows at 4 positions.
                let mut variants = vec![];
                if dim.is_power_of_two() {
                    for rows in [4u32, 8] {
                        variants.extend([4u32, 8].map(|w| (RotaryRows::Heads, rows, w)));
                    }
                    variants.push((RotaryRows::Heads, 16, 4));
                }
                variants.push((RotaryRows::Positions, 4, 4));
                for (along, rows, waves) in variants {
                    let c = RotaryConfig {
                        along,
                        rows,
                        waves,
                        ..default
                    };
                    if !cfgs.contains(&c) {
                        cfgs.push(c);
                    }
                }
            }
        }
        let bytes = 2 * (b * h * n * d) as u64 * 2 + 2 * (n * d) as u64;
        for c in cfgs {
            cases.push(StripCase {
                label: format!(
                    "B{b} H{h} N{n} D{d} {:?}{} {:?}/wave={} waves={}",
                    c.layout,
                    if c.interleaved { " interleaved" } else { "" },
                    c.along,
                    c.rows,
                    c.waves
                ),
                lowered: lower(rotary::build(&c).map_err(Into::into))?,
                params: vec![
                    ("batch".into(), i64::try_from(b)?),
                    ("heads".into(), i64::try_from(h)?),
                    ("seq".into(), i64::try_from(n)?),
                ],
                bytes,
            });
        }
    }
    Ok(cases)
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let cases = match a.kernel.name {
        "layernorm" => layernorm_cases(
            a.shapes
                .as_deref()
                .unwrap_or("65536x2048,16384x8192,65536x768"),
            a.p,
        )?,
        _ => rotary_cases(
            a.shapes
                .as_deref()
                .unwrap_or("16x16x4096x128,16x32x4096x64"),
        )?,
    };
    let report = run_strip_sweep(&cases, a.iters.max(1))
        .with_context(|| format!("{} sweep on the GPU", a.kernel.name))?;
    use kittens_runtime::build_info::BUILD;
    let doc = serde_json::json!({
        "benchmark": format!("{} strip program (sm_90a) at several configurations", a.kernel.name),
        "commit": BUILD.commit,
        "dirty": BUILD.dirty,
        "report": report,
    });
    if let Some(path) = a.json.as_deref().filter(|p| *p != "-") {
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?;
    }
    if a.json.as_deref() == Some("-") {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{}: copy {:.0} GB/s, median of {}",
        report.device, report.copy_gbs, report.iters
    );
    for r in &report.rows {
        println!(
            "{:<64} {:>7.0} GB/s {:>5.2} of copy  {:>3} regs {:>4} threads{}",
            r.label,
            r.gbs,
            r.of_copy,
            r.registers,
            r.threads,
            if r.spills > 0 { " SPILLS" } else { "" }
        );
    }
    Ok(())
}
