//! `kittens list [--json]`: every kernel of the registry with the targets it lowers to and, for each,
//! the schedule it is built with there and how far it has got. Everything printed comes from
//! `kittens_kernels::registry`.

use kittens_kernels::registry::{self, Status};

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&document())?);
        return Ok(());
    }
    for e in &registry::ALL {
        println!("{}  {}", e.name, e.about);
        for p in e.targets {
            let detail = match p.status {
                Status::Measured { evidence } => format!(" ({evidence})"),
                Status::NotYet { why } => format!(": {why}"),
                Status::Interpreted | Status::Compiles => String::new(),
            };
            println!(
                "  {:<7} {:<12} {}{detail}",
                p.target.name(),
                p.status.label(),
                p.schedule
            );
        }
    }
    Ok(())
}

/// `{"kernels": [{"name", "about", "targets": [{"target", "schedule", "status", ...}]}]}`; `lowers_to`
/// lists the GPU targets whose status is not "not yet".
fn document() -> serde_json::Value {
    let kernels: Vec<serde_json::Value> = registry::ALL
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            let lowers: Vec<&str> = e
                .targets
                .iter()
                .filter(|p| p.status.available() && p.target.gpu().is_some())
                .map(|p| p.target.name())
                .collect();
            v["lowers_to"] = lowers.into();
            v
        })
        .collect();
    serde_json::json!({ "kernels": kernels })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document names every registry kernel once, with every target of its plan, and `lowers_to`
    /// agrees with the statuses.
    #[test]
    fn json_lists_every_kernel_and_target() {
        let doc = document();
        let kernels = doc["kernels"].as_array().expect("a list");
        assert_eq!(kernels.len(), registry::ALL.len());
        for (v, e) in kernels.iter().zip(&registry::ALL) {
            assert_eq!(v["name"], e.name);
            let targets = v["targets"].as_array().expect("targets");
            assert_eq!(targets.len(), e.targets.len());
            for (t, p) in targets.iter().zip(e.targets) {
                assert_eq!(t["target"], p.target.name());
                assert_eq!(t["schedule"], p.schedule);
                assert!(t["status"].is_string(), "{t}");
            }
        }
        let gemm = &kernels[0];
        assert_eq!(gemm["name"], "gemm_bf16");
        assert_eq!(
            gemm["lowers_to"],
            serde_json::json!(["gfx942", "gfx950", "sm_90a"])
        );
    }
}
