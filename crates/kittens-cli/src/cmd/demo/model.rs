//! The model line of the GPU demo: a Llama-style model (about 125M parameters, random weights) trained a
//! few steps with Hugging Face's own modules and with kittens' (`kittens.integrations.transformers.apply`)
//! from the same weights on the same batches, in one Python process. It is the Python package's
//! benchmark (`python -m kittens.bench model --suite issue35`; docs/performance.md, "In a model") run small, so
//! the demo shows what a user sees inside a model beside the per-kernel lines.
//!
//! It needs `python3` with torch, transformers and the kittens package (`pip install './python[hf]'`);
//! without them the line says what is missing and the demo goes on. The interpreter runs in a fresh
//! private folder with `PYTHONSAFEPATH=1`, so no module is imported from the folder the demo was started
//! in (which another user may be able to write).

use super::Section;
use serde_json::{json, Value};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The run's limit: the two arms take about half a minute on an H100/H200 (kernel loading included).
const LIMIT: Duration = Duration::from_secs(600);
const ARGS: &[&str] = &[
    "-m",
    "kittens.bench",
    "model",
    "--size",
    "125m",
    "--seq",
    "1024",
    "--batch",
    "8",
    "--steps",
    "8",
    "--skip-timing",
    "3",
    "--log-every",
    "100",
    "--no-infer",
    "--arms",
    "hf,kittens",
];

pub fn run(s: &mut Section) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("kittens-demo-model")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("creating a private folder for the model run: {e}"))?;
    let report = dir.path().join("model.json");
    s.line(format!(
        "python3 {} --json <tmp>/model.json",
        ARGS.join(" ")
    ));
    let child = Command::new("python3")
        .args(ARGS)
        .arg("--json")
        .arg(&report)
        .current_dir(dir.path())
        .env("PYTHONSAFEPATH", "1")
        .stdin(Stdio::null())
        .stdout(std::io::stderr()) // the benchmark's progress, like the demo's own
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            s.line(format!(
                "model: skipped (python3 could not be started: {e})"
            ));
            return Ok(json!({"skipped": format!("python3: {e}")}));
        }
    };
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if started.elapsed() > LIMIT {
            child.kill().ok();
            child.wait().ok();
            anyhow::bail!(
                "the model run took more than {} s; stopped",
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).ok();
    }
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if status.code() == Some(2) {
        // The benchmark's own refusal: no torch/transformers/kittens, or no CUDA device for torch.
        s.line(format!("model: skipped ({last})"));
        return Ok(json!({"skipped": last}));
    }
    let text = std::fs::read_to_string(&report).map_err(|e| {
        anyhow::anyhow!("the model run ({status}) wrote no report ({e}); its last words: {last}")
    })?;
    let doc: Value = serde_json::from_str(&text)?;
    let arm = |k: &str| doc["training"][k].clone();
    let (hf, ours) = (arm("hf"), arm("kittens"));
    let ran = |a: &Value| a["ran"].as_bool() == Some(true);
    for (name, a) in [("HF eager (SDPA)", &hf), ("kittens", &ours)] {
        if ran(a) {
            s.line(format!(
                "{name:<16} {:>10.0} tokens/s  peak {:>5.2} GiB  loss {:.4}",
                a["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
                a["peak_gib"].as_f64().unwrap_or(f64::NAN),
                a["final_loss"].as_f64().unwrap_or(f64::NAN)
            ));
        } else {
            s.line(format!(
                "{name:<16} FAILED: {}",
                a["error"].as_str().unwrap_or("did not run")
            ));
        }
    }
    anyhow::ensure!(
        ran(&hf) && ran(&ours),
        "a training arm of the model run failed (above)"
    );
    let speed =
        ours["tokens_per_s"].as_f64().unwrap_or(0.0) / hf["tokens_per_s"].as_f64().unwrap_or(1.0);
    let memory = ours["peak_gib"].as_f64().unwrap_or(0.0) / hf["peak_gib"].as_f64().unwrap_or(1.0);
    s.line(format!(
        "kittens / HF eager: {speed:.2}x tokens/s, {memory:.2}x peak memory ({}; the whole sweep with \
         torch.compile arms, inference and loss curves: python -m kittens.bench model --help)",
        doc["device"].as_str().unwrap_or("?")
    ));
    anyhow::ensure!(
        status.success(),
        "the model run ended with {status} (its loss curves differ beyond bf16 noise, above)"
    );
    Ok(json!({
        "device": doc["device"], "commit": doc["commit"], "config": doc["config"],
        "hf": {"tokens_per_s": hf["tokens_per_s"], "peak_gib": hf["peak_gib"], "final_loss": hf["final_loss"]},
        "kittens": {"tokens_per_s": ours["tokens_per_s"], "peak_gib": ours["peak_gib"],
                    "final_loss": ours["final_loss"]},
        "speed_ratio": speed, "memory_ratio": memory,
    }))
}
