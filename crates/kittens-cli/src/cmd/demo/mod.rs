//! `kittens demo`: the main job. With an NVIDIA driver it checks every kernel on the GPU through the
//! generic CUDA runner and times each against its baseline (`gpu`), then trains a small model on them
//! against Hugging Face's modules (`model`, when the Python package is installed); without one it runs the suite on the CPU backend, compiles it for every target and prints
//! the hardware analysis. Each part is a [`Section`] that prints as it goes (progress on stderr) and
//! contributes one key to the `--json` document.

mod analysis;
mod gpu;
mod model;
mod suite;
mod targets;

use serde_json::{Map, Value};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON document on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Skip the GPU benchmark even when a driver is present.
    #[arg(long)]
    pub cpu_only: bool,
    /// Folder for the pictures (bank SVGs like HipKittens Fig. 4, first-round grid PNGs like Fig. 5).
    #[arg(long, default_value = "target/kittens-demo")]
    pub pictures: std::path::PathBuf,
}

/// One titled part of the demo's output.
pub struct Section {
    quiet: bool,
    pictures: std::path::PathBuf,
}

impl Section {
    pub fn pictures_dir(&self) -> String {
        self.pictures.display().to_string()
    }

    /// Write a picture into the pictures folder and say where it went.
    pub fn picture(&mut self, name: &str, bytes: &[u8]) -> anyhow::Result<String> {
        std::fs::create_dir_all(&self.pictures)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", self.pictures.display()))?;
        let path = self.pictures.join(name);
        std::fs::write(&path, bytes)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        Ok(path.display().to_string())
    }

    pub fn line(&mut self, text: impl AsRef<str>) {
        if !self.quiet {
            println!("  {}", text.as_ref());
        }
    }
}

type Part = fn(&mut Section) -> anyhow::Result<Value>;

pub fn run(args: Args) -> anyhow::Result<()> {
    let gpu = if args.cpu_only {
        Err("--cpu-only".to_string())
    } else {
        gpu::probe().map_err(|e| e.to_string())
    };
    let mut parts: Vec<(&str, &str, Part)> = Vec::new();
    match &gpu {
        Ok(name) => {
            eprintln!(
                "NVIDIA GPU found ({name}): every kernel checked and timed against its baseline"
            );
            parts.push((
                "gpu",
                "The kernel suite on the GPU: checked against f64, timed against its baseline",
                gpu::run,
            ));
            parts.push((
                "model",
                "A Llama-style model training on kittens vs Hugging Face (python -m kittens.bench model)",
                model::run,
            ));
        }
        Err(why) => {
            eprintln!(
                "no NVIDIA GPU ({why}): CPU backend, compile for every target, hardware analysis"
            );
            parts.push((
                "suite",
                "The kernel suite on the CPU backend vs f64 references",
                suite::run,
            ));
            parts.push((
                "targets",
                "Every kernel compiled for gfx942, gfx950 (AMDGPU clang) and sm_90a (NVRTC)",
                targets::run,
            ));
        }
    }
    parts.extend([
        (
            "catalog",
            "GPU catalog (sources: crates/kittens-hw/src/gpu.rs)",
            (|s: &mut Section| Ok(analysis::catalog(s))) as Part,
        ),
        (
            "banks",
            "Shared-memory bank conflicts, HipKittens Fig. 4 and D.1",
            analysis::banks,
        ),
        (
            "grid",
            "Chiplet grid orders on the MI355X cache model, HipKittens Table 4",
            analysis::grid,
        ),
        (
            "planners",
            "Tail KV split (MI300X-attn §5.2) and register budgets (HipKittens Table 2)",
            analysis::planners,
        ),
    ]);
    let mut doc = Map::new();
    let total = parts.len();
    for (i, (key, title, part)) in parts.into_iter().enumerate() {
        eprintln!("[{}/{}] {title}", i + 1, total);
        if !args.json {
            println!("\n== {title}");
        }
        let started = Instant::now();
        let mut section = Section {
            quiet: args.json,
            pictures: args.pictures.clone(),
        };
        let value = part(&mut section).map_err(|e| e.context(format!("demo part `{key}`")))?;
        eprintln!("      done in {:.1} s", started.elapsed().as_secs_f64());
        doc.insert(key.to_string(), value);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(doc))?);
    }
    Ok(())
}
