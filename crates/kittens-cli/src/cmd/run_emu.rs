//! `kittens run <kernel> --backend hip-emu --target gfx942|gfx950`: the kernel's lowered HIP for the
//! target, compiled for this CPU against the emulation header and run on the same random inputs as
//! `--backend cpu` (`kittens_runtime::amd::emulate::run_registry`); the same report, and `passed`.

use super::run::{problem, Args};
use anyhow::{bail, Context};
use kittens_hw::Target;
use kittens_runtime::amd::emulate;

pub fn run(args: &Args) -> anyhow::Result<()> {
    let target = match args.target {
        Some(t @ (Target::Gfx942 | Target::Gfx950)) => t,
        Some(t) => bail!("--backend hip-emu runs AMD targets (gfx942 or gfx950), not {t}"),
        None => bail!("--backend hip-emu needs --target gfx942 or --target gfx950"),
    };
    if args.ir {
        bail!("--ir prints the interpreter's kernel; use `kittens compile --emit hip` for the HIP");
    }
    let p = problem(args)?;
    let gpu = target
        .gpu()
        .with_context(|| format!("no GPU in the catalog for {target}"))?;
    let name = args.kernel.name;
    let r = emulate::run_registry(name, &p, gpu)
        .with_context(|| format!("running the lowered `{name}` for {target} on the emulation"))?;
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        v["backend"] = "hip-emu".into();
        v["rel_err_definition"] = "||out - ref||_F / ||ref||_F against an f64 reference".into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "kernel   {} (backend hip-emu, {target} as configured for {}, {} blocks × {} waves)",
            r.kernel, r.configured_for, r.blocks, r.waves_per_block
        );
        println!("shape    {}", r.shape);
        println!(
            "rel_err  {:.3e}   (‖out − ref‖_F / ‖ref‖_F, f64 reference)",
            r.error.rel_err
        );
        println!(
            "max_rel  {:.3e}   (max |out − ref| / max |ref|)",
            r.error.max_rel
        );
        println!(
            "mean_rel {:.3e}   (mean |out − ref| / mean |ref|)",
            r.error.mean_rel
        );
        println!(
            "time     host compile {:.3} s, emulation {:.3} s, reference {:.3} s",
            r.compile_seconds, r.run_seconds, r.reference_seconds
        );
        println!("passed   {} (rel_err ≤ {:e})", r.passed, r.tolerance);
    }
    if !r.passed {
        bail!(
            "`{}` on hip-emu ({target}): rel_err {:.3e} exceeds the tolerance {:e}",
            r.kernel,
            r.error.rel_err,
            r.tolerance
        );
    }
    Ok(())
}
