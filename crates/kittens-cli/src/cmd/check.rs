//! `kittens check <kernel>`: the schedule analysis of a kernel's launch (docs/analysis.md) — which
//! clusters each wave runs in which barrier interval, the hazards (missing waits, missing barriers,
//! deadlocks) of every distinct block, and every wait's written and computed count.

use anyhow::{bail, Context};
use kittens_ir::analysis::{analyze, analyze_launch, Hazard, Options, Report, Site};
use kittens_kernels::registry::KernelEntry;

use super::flags::param_values;

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name, from the registry (`kittens list`); none with --kernel-file.
    #[arg(value_parser = super::kernel_file::kernel_arg, default_value = super::kernel_file::NONE_GIVEN, hide_default_value = true)]
    pub kernel: &'static KernelEntry,
    #[command(flatten)]
    pub file: super::kernel_file::KernelFile,
    /// A kernel parameter, `name=value` (repeatable, or comma-separated). Unset parameters take small
    /// defaults: m=n=512, k=1024, batch=1, heads=2, heads_kv=1, seq=512, anything else 256.
    #[arg(long = "param", short = 'p', value_delimiter = ',')]
    pub params: Vec<String>,
    /// Analyse only the block at these grid coordinates, comma-separated (default: every distinct
    /// block of the launch).
    #[arg(long = "block", value_delimiter = ',')]
    pub block: Vec<i64>,
    /// Loop iterations kept at each end of a long loop (default 3 + the deepest shared ring).
    #[arg(long)]
    pub head_iters: Option<i64>,
    /// Accept shared→register reads still in flight when a later async copy overwrites their slot
    /// (HipKittens' `lgkmcnt(8)`-before-barrier pattern; the LLVM memory model does not promise it).
    #[arg(long)]
    pub trust_lds_latency: bool,
    /// Delete op N (the index `check` prints) before analysing, to see what a barrier or wait guards
    /// (repeatable; indices refer to the unmodified kernel).
    #[arg(long = "drop-op")]
    pub drop_ops: Vec<usize>,
    /// Also list every op with its index (what hazards and --drop-op refer to).
    #[arg(long)]
    pub ops: bool,
    /// Exit with status 1 when the analysis finds a hazard.
    #[arg(long)]
    pub deny_hazards: bool,
    /// Build the kernel as configured for this GPU (e.g. `mi300x` gives gemm_bf16's register-staged
    /// gfx942 variant); default: the kernel's default configuration.
    #[arg(long, value_parser = kittens_hw::gpu)]
    pub gpu: Option<&'static kittens_hw::Gpu>,
    /// A named variant of the kernel for `--gpu`'s target (the GEMMs' `interleave4` on gfx950).
    #[arg(long, alias = "variant", requires = "gpu")]
    pub schedule: Option<String>,
    /// Instead of the schedule analysis, list every shared-memory access of the hot loop with the
    /// instruction the AMD lowering issues, the swizzle the bank solver chose and the worst bank
    /// conflict (needs an AMD `--gpu`).
    #[arg(long)]
    pub banks: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Relations between parameters that the kernels assume and the analysis cannot see (`kittens run`
/// refuses the same): grouped-query attention's key/value heads divide the query heads.
fn check_relations(names: &[String], values: &[i64]) -> anyhow::Result<()> {
    let get = |n: &str| names.iter().position(|x| x == n).map(|i| values[i]);
    if let (Some(h), Some(hkv)) = (get("heads"), get("heads_kv")) {
        if hkv >= 1 && h >= 1 && h % hkv != 0 {
            bail!("--param heads_kv={hkv} must divide heads={h}");
        }
    }
    Ok(())
}

/// Index in the unmodified kernel of op `i` of the kernel with the ops `dropped` (ascending) removed.
fn original_index(mut i: usize, dropped: &[usize]) -> usize {
    for &d in dropped {
        if i >= d {
            i += 1;
        }
    }
    i
}

/// Makes a report on a kernel with dropped ops name ops by their index in the unmodified kernel.
fn renumber(r: &mut Report, dropped: &[usize]) {
    let fix = |s: &mut Site| s.op = original_index(s.op, dropped);
    for h in &mut r.hazards {
        match h {
            Hazard::MissingWait {
                pending: a,
                access: b,
                ..
            }
            | Hazard::MissingBarrier {
                first: a,
                second: b,
                ..
            } => {
                fix(a);
                fix(b);
            }
            Hazard::Deadlock { waiting } => waiting.iter_mut().for_each(fix),
        }
    }
    r.waits
        .iter_mut()
        .for_each(|w| w.op = original_index(w.op, dropped));
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let info = args.file.resolve(args.kernel)?;
    let mut kernel = match (&args.gpu, &args.schedule) {
        (Some(gpu), Some(v)) => info.build_variant(kittens_hw::Target::from(gpu.arch), Some(v)),
        (Some(gpu), None) => info.build_for_gpu(gpu),
        (None, _) => info.build_default(),
    }
    .with_context(|| format!("building {}", info.name))?;
    if args.banks {
        return super::check_banks::run(&kernel, args.gpu, args.json);
    }
    let mut drops = args.drop_ops.clone();
    drops.sort_unstable();
    drops.dedup();
    for &i in drops.iter().rev() {
        // Highest first, so the lower indices still name the same ops.
        let name = kernel
            .op(i)
            .map(|o| o.name())
            .with_context(|| format!("--drop-op {i}: no such op"))?;
        eprintln!("dropping op #{i} {name}");
        kernel = kernel
            .without_op(i)
            .with_context(|| format!("--drop-op {i}: no such op"))?;
    }
    let names: Vec<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    let words: Vec<bool> = kernel.params.iter().map(|p| p.word).collect();
    let params = param_values(&names, &words, &args.params)?;
    check_relations(&names, &params)?;
    let dims = kernel.grid.extents.len();
    if !args.block.is_empty() && args.block.len() != dims {
        bail!(
            "--block {:?}: the grid of {} has {dims} dimension(s); give {dims} coordinate(s)",
            args.block,
            info.name
        );
    }
    let opts = Options {
        params,
        block: args.block.clone(),
        head_iters: args.head_iters,
        trust_lds_latency: args.trust_lds_latency,
    };
    let context = || format!("analysing {}", info.name);
    // Parameters that make an empty problem (a size below 1) are refused by the analysis.
    let (text, json, hazards) = if args.block.is_empty() {
        let mut launch = analyze_launch(&kernel, &opts).with_context(context)?;
        for c in &mut launch.classes {
            renumber(&mut c.report, &drops);
        }
        let n = launch.hazards().count();
        (
            launch.to_string(),
            serde_json::to_string_pretty(&launch)?,
            n,
        )
    } else {
        let mut report = analyze(&kernel, &opts).with_context(context)?;
        renumber(&mut report, &drops);
        let n = report.hazards.len();
        (
            report.to_string(),
            serde_json::to_string_pretty(&report)?,
            n,
        )
    };
    if args.json {
        println!("{json}");
    } else {
        if args.ops {
            println!("ops (* = implied by the schedule):");
            for o in kernel.ops() {
                let mark = if o.implied { "*" } else { " " };
                println!(
                    "  #{:<4}{mark} {}{}",
                    o.index,
                    "  ".repeat(o.depth),
                    o.op.name()
                );
            }
            println!();
        }
        print!("{text}");
    }
    if args.deny_hazards && hazards > 0 {
        bail!("{hazards} hazard(s) in {}", info.name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_default_and_override_by_name() {
        let names: Vec<String> = ["m", "n", "k"].map(String::from).into();
        let w = [false; 3];
        assert_eq!(param_values(&names, &w, &[]).unwrap(), vec![512, 512, 1024]);
        assert_eq!(
            param_values(&names, &w, &["k=64".into(), "m = 128".into()]).unwrap(),
            vec![128, 512, 64]
        );
        assert!(param_values(&names, &w, &["q=1".into()]).is_err());
        assert!(param_values(&names, &w, &["k".into()]).is_err());
        assert!(param_values(&names, &w, &["k=x".into()]).is_err());
        let words: Vec<String> = ["rows", "seed_lo"].map(String::from).into();
        assert_eq!(
            param_values(&words, &[false, true], &[]).unwrap(),
            vec![256, 0]
        );
    }

    #[test]
    fn key_value_heads_must_divide_the_query_heads() {
        let names: Vec<String> = ["heads", "heads_kv"].map(String::from).into();
        assert!(check_relations(&names, &[3, 2]).is_err());
        assert!(check_relations(&names, &[4, 2]).is_ok());
    }

    #[test]
    fn indices_after_dropping_ops_map_back_to_the_original_kernel() {
        // Original ops 0..8 with 2 and 5 dropped: the remaining ones are 0 1 3 4 6 7.
        let kept: Vec<usize> = (0..6).map(|i| original_index(i, &[2, 5])).collect();
        assert_eq!(kept, vec![0, 1, 3, 4, 6, 7]);
    }
}
