//! What the examples share: the race check, the lowering report for every GPU target (budgets,
//! then the real compilers where installed), and writing the kernel file.

use kittens_hw::{Arch, Target};
use kittens_ir::analysis::{analyze_launch, Options};
use kittens_ir::Kernel;

/// The schedule analysis of the launch at `params`: every hazard, or none.
pub fn race_check(k: &Kernel, params: &[i64]) -> usize {
    let opts = Options {
        params: params.to_vec(),
        ..Options::default()
    };
    match analyze_launch(k, &opts) {
        Ok(l) => {
            let n = l.hazards().count();
            println!(
                "race check: {n} hazard(s) over {} block class(es), {} blocks traced",
                l.classes.len(),
                l.traced_blocks
            );
            for (_, h) in l.hazards() {
                println!("  {h}");
            }
            n
        }
        Err(e) => {
            println!("race check: not run ({e})");
            0
        }
    }
}

/// Lowers `k` for gfx942, gfx950 and sm_90a: the budgets (checked by every lowering), the source,
/// and where the compilers are installed, what they made of it. Returns the targets it lowered to.
pub fn lowering_report(k: &Kernel) -> Vec<Target> {
    let mut ok = vec![];
    for t in [Target::Gfx942, Target::Gfx950, Target::Sm90a] {
        let l = match kittens_codegen::lower(k, t) {
            Ok(l) => l,
            Err(e) => {
                println!("{t}: refused: {e}");
                continue;
            }
        };
        ok.push(t);
        let b = kittens_codegen::check_budgets(k, t).expect("lowered, so within budget");
        println!(
            "{t}: {} lines of {}, {} threads per block; registers ~{} of {} per lane, shared {} of {} B",
            l.source.lines().count(),
            if t == Target::Sm90a { "CUDA" } else { "HIP" },
            l.threads,
            b.regs_per_wave,
            b.reg_budget,
            b.shared_bytes,
            b.shared_budget
        );
        compile(t, &l);
    }
    ok
}

fn compile(t: Target, l: &kittens_codegen::Lowered) {
    match t.arch() {
        Some(arch @ (Arch::Cdna3 | Arch::Cdna4)) => {
            let clang = match kittens_runtime::amd::find_clang(arch) {
                Ok(c) => c,
                Err(e) => return println!("  no AMDGPU clang here: {e}"),
            };
            match clang.compile(&l.source, arch).and_then(|c| {
                kittens_runtime::amd::analyze(&c.asm, arch, Some(&l.entry))
            }) {
                Ok(r) => println!(
                    "  clang: vgpr {} agpr {} sgpr {}, spills {} / {}, LDS {} B, {} instructions ({} in the hot loop)",
                    r.vgpr,
                    r.agpr,
                    r.sgpr,
                    r.vgpr_spill,
                    r.sgpr_spill,
                    r.lds_bytes,
                    r.mix.total,
                    r.hot_loop.as_ref().map_or(0, |h| h.mix.total)
                ),
                Err(e) => println!("  clang failed: {e}"),
            }
        }
        _ => match kittens_runtime::cuda::compile_report(
            &l.source,
            &l.entry,
            t.name(),
            l.dynamic_shared_bytes(),
        ) {
            Ok(r) => println!(
                "  NVRTC {}: {} registers, spill stores {} loads {}",
                r.nvrtc_version, r.registers, r.spill_stores, r.spill_loads
            ),
            Err(e) => println!("  no NVRTC here ({e}); scripts/install-nvrtc.sh installs it"),
        },
    }
}

/// Writes the kernel file and says what to do with it.
pub fn write_kernel_file(k: &Kernel) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("kittens-examples");
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let path = dir.join(format!("{}.json", k.name));
    std::fs::write(&path, kittens_ir::serial::to_json(k)).expect("writing the kernel file");
    println!("kernel file: {}", path.display());
    let params: String = k
        .params
        .iter()
        .map(|p| format!(" -p {}=37", p.name))
        .collect();
    println!(
        "  kittens check --kernel-file {0} | kittens compile --kernel-file {0} --target gfx950 | \
         kittens run --kernel-file {0}{params}",
        path.display()
    );
    path
}
