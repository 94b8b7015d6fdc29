//! `kittens check <kernel>`: the schedule analysis of one block of a kernel (docs/analysis.md) — which
//! clusters each wave runs in which barrier interval, the hazards (missing waits, missing barriers,
//! deadlocks) and every wait's written and computed count.

use anyhow::{anyhow, bail, Context};
use kittens_ir::analysis::{analyze, Options};

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name (the `kittens_kernels` registry: gemm_bf16, attn_fwd).
    pub kernel: String,
    /// A kernel parameter, `name=value` (repeatable, or comma-separated). Unset parameters take small
    /// defaults: m=n=512, k=1024, batch=1, heads=2, heads_kv=1, seq=512, anything else 256.
    #[arg(long = "param", short = 'p', value_delimiter = ',')]
    pub params: Vec<String>,
    /// Grid coordinates of the analysed block, comma-separated (default all 0).
    #[arg(long = "block", value_delimiter = ',')]
    pub block: Vec<i64>,
    /// Loop iterations kept at each end of a long loop (default 3 + the deepest shared ring).
    #[arg(long)]
    pub head_iters: Option<i64>,
    /// Accept shared→register reads still in flight when a later async copy overwrites their slot
    /// (HipKittens' `lgkmcnt(8)`-before-barrier pattern; the LLVM memory model does not promise it).
    #[arg(long)]
    pub trust_lds_latency: bool,
    /// Exit with status 1 when the analysis finds a hazard.
    #[arg(long)]
    pub deny_hazards: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A small default for a parameter, so that loops run a handful of iterations.
fn default_param(name: &str) -> i64 {
    match name {
        "m" | "n" | "seq" => 512,
        "k" => 1024,
        "batch" | "heads_kv" => 1,
        "heads" => 2,
        _ => 256,
    }
}

fn param_values(names: &[String], given: &[String]) -> anyhow::Result<Vec<i64>> {
    let mut values: Vec<i64> = names.iter().map(|n| default_param(n)).collect();
    for g in given {
        let (name, value) = g.split_once('=').ok_or_else(|| anyhow!("--param `{g}`: expected name=value"))?;
        let i = names
            .iter()
            .position(|n| n == name.trim())
            .ok_or_else(|| anyhow!("--param `{name}`: the kernel's parameters are {}", names.join(", ")))?;
        values[i] = value.trim().parse().with_context(|| format!("--param `{g}`: not an integer"))?;
    }
    Ok(values)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Some(info) = kittens_kernels::by_name(&args.kernel) else {
        bail!("unknown kernel `{}`; known: {}", args.kernel, kittens_kernels::NAMES.join(", "));
    };
    let kernel = (info.build_default)().with_context(|| format!("building {}", info.name))?;
    let names: Vec<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    let opts = Options {
        params: param_values(&names, &args.params)?,
        block: args.block.clone(),
        head_iters: args.head_iters,
        trust_lds_latency: args.trust_lds_latency,
    };
    let report = analyze(&kernel, &opts).with_context(|| format!("analysing {}", info.name))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    if args.deny_hazards && !report.hazards.is_empty() {
        bail!("{} hazard(s) in {}", report.hazards.len(), info.name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_default_and_override_by_name() {
        let names: Vec<String> = ["m", "n", "k"].map(String::from).into();
        assert_eq!(param_values(&names, &[]).unwrap(), vec![512, 512, 1024]);
        assert_eq!(param_values(&names, &["k=64".into(), "m = 128".into()]).unwrap(), vec![128, 512, 64]);
        assert!(param_values(&names, &["q=1".into()]).is_err());
        assert!(param_values(&names, &["k".into()]).is_err());
        assert!(param_values(&names, &["k=x".into()]).is_err());
    }
}
