//! The ISA emulator's decoder against an independent disassembly: for every registry kernel and AMD
//! target, the code object clang builds is decoded instruction by instruction, and each instruction's
//! text and length must equal what LLVM's own printer and encoder say for the same offset (the
//! assembler's `-show-encoding` listing of the same assembly). Branch targets are compared as byte
//! offsets, resolved from the listing's labels.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::clang_for;
use kittens_amdsim::{decode_all, Kernel};
use kittens_hw::{Arch, Target};
use kittens_kernels::attn::AttnArgs;
use std::collections::HashMap;

/// One instruction of the listing: its byte offset in the function, text, and bytes (`None` where the
/// encoder left a fixup, i.e. a branch offset it fills in later).
struct Listed {
    offset: u32,
    text: String,
    bytes: Vec<Option<u8>>,
}

/// The instructions of function `name` in an `-show-encoding` listing, and its labels' offsets.
fn parse_listing(listing: &str, name: &str) -> (Vec<Listed>, HashMap<String, u32>) {
    let mut out = Vec::new();
    let mut labels = HashMap::new();
    let mut on = false;
    let mut off = 0u32;
    for line in listing.lines() {
        let t = line.split(';').next().unwrap_or("").trim();
        let t = if t.is_empty() { line.trim() } else { t };
        if !on {
            on = t == format!("{name}:");
            continue;
        }
        if t.starts_with(".Lfunc_end") || t.starts_with(".section") {
            break;
        }
        if let Some(l) = t.strip_suffix(':') {
            labels.insert(l.to_string(), off);
            continue;
        }
        assert!(
            !t.starts_with(".p2align"),
            "alignment inside the function is not handled: {t}"
        );
        let Some((text, enc)) = line.trim().split_once("; encoding: [") else {
            continue;
        };
        let bytes: Vec<Option<u8>> = enc
            .trim_end_matches(']')
            .split(',')
            .map(|b| {
                b.strip_prefix("0x")
                    .map(|h| u8::from_str_radix(h, 16).expect("a hex byte"))
            })
            .collect();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push(Listed {
            offset: off,
            text,
            bytes: bytes.clone(),
        });
        off += bytes.len() as u32;
    }
    assert!(on, "function {name} not found in the listing");
    (out, labels)
}

/// The listing's text with a branch label replaced by `pc+<offset>`, as the decoder prints it.
fn resolve(text: &str, labels: &HashMap<String, u32>) -> String {
    match text.split_once(' ') {
        Some((m, l)) if m.starts_with("s_branch") || m.starts_with("s_cbranch") => {
            let at = labels.get(l).unwrap_or_else(|| panic!("unknown label {l}"));
            format!("{m} pc+{at}")
        }
        _ => text.to_string(),
    }
}

fn check(
    kernel: &kittens_kernels::registry::KernelEntry,
    variant: Option<&str>,
    target: Target,
    arch: Arch,
) -> usize {
    let k = kernel.build_variant(target, variant).unwrap();
    check_kernel(kernel, &k, target, arch)
}

fn check_kernel(
    kernel: &kittens_kernels::registry::KernelEntry,
    k: &kittens_ir::Kernel,
    target: Target,
    arch: Arch,
) -> usize {
    let lowered = kittens_codegen::lower(k, target).unwrap();
    let clang = clang_for(arch);
    let compiled = clang.compile(&lowered.source, arch).unwrap();
    let listing = clang.encoding_listing(&compiled.asm, arch).unwrap();
    let loaded = Kernel::load(&compiled.code_object).unwrap();
    assert_eq!(loaded.arch, arch);
    assert_eq!(loaded.name, lowered.entry);
    let decoded = decode_all(&loaded.code, arch)
        .unwrap_or_else(|e| panic!("{} {}: {e}", kernel.name, arch.target()));
    let (listed, labels) = parse_listing(&listing, &loaded.name);
    let mut mismatches = Vec::new();
    let mut li = listed.iter();
    for d in &decoded {
        let Some(l) = li.next() else {
            // Past the listing's last instruction only the assembler's s_code_end padding may follow.
            assert_eq!(d.text(), "s_nop 0", "{} {}", kernel.name, arch.target());
            continue;
        };
        assert_eq!(d.offset, l.offset, "instruction boundaries diverge");
        assert_eq!(
            d.size as usize,
            l.bytes.len(),
            "length at {:#x}: {}",
            l.offset,
            l.text
        );
        let code = &loaded.code[d.offset as usize..d.offset as usize + d.size as usize];
        for (b, lb) in code.iter().zip(&l.bytes) {
            if let Some(lb) = lb {
                assert_eq!(
                    b, lb,
                    "code object and listing bytes differ at {:#x}",
                    l.offset
                );
            }
        }
        let want = resolve(&l.text, &labels);
        if d.text() != want {
            mismatches.push(format!(
                "{:#06x}: decoded `{}`, listing `{want}`",
                d.offset,
                d.text()
            ));
        }
    }
    assert!(
        li.next().is_none(),
        "listing has instructions past the code"
    );
    assert!(
        mismatches.is_empty(),
        "{} {}: {} of {} differ:\n{}",
        kernel.name,
        arch.target(),
        mismatches.len(),
        decoded.len(),
        mismatches.join("\n")
    );
    decoded.len()
}

#[test]
fn decoder_agrees_with_llvm_listing_on_every_shipped_kernel() {
    let mut checked = 0;
    for kernel in kittens_kernels::registry::ALL.iter() {
        for target in [Target::Gfx942, Target::Gfx950] {
            if kernel.build_for(target).is_err() {
                continue;
            }
            let arch = target.arch().unwrap();
            // The default configuration and every named variant built for this target.
            let variants = kernel
                .variants
                .iter()
                .filter(|v| v.targets.contains(&target))
                .map(|v| Some(v.name));
            for variant in std::iter::once(None).chain(variants) {
                let n = check(kernel, variant, target, arch);
                eprintln!(
                    "{} {} {}: {n} instructions agree",
                    kernel.name,
                    variant.unwrap_or("default"),
                    arch.target()
                );
                checked += 1;
            }
        }
    }
    assert_eq!(
        checked, 51,
        "thirteen kernels on two AMD targets, the varlen forward and backward and the paged decode on both, two gfx950 GEMM variants, the causal attention on both, \
         the backward's interleave4 and pingpong8 on both, MI300X-attn's configuration on gfx942, \
         the rmsnorm and layernorm backwards' dweight launches, SwiGLU's packed forms and the \
         cross-entropy's f32 form on both"
    );
}

/// A second, fully independent reference for gfx942: Debian's `llvm-objdump-19` disassembling the
/// code object's bytes (no assembler involved). Every instruction of every shipped gfx942 kernel must
/// decode to its text (branch targets compared as byte offsets). Missing the tool is a failure in
/// CI (scripts/install-amdgpu-clang.sh installs llvm-19) and a note elsewhere.
#[test]
fn decoder_agrees_with_llvm_objdump_19_on_gfx942() {
    let Some(objdump) =
        kittens_runtime::amd::toolchain::which(std::path::Path::new("llvm-objdump-19"))
    else {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true but llvm-objdump-19 is missing (apt-get install llvm-19)"
        );
        eprintln!("llvm-objdump-19 not found: skipped outside CI");
        return;
    };
    let dir = std::env::temp_dir().join(format!("kittens-objdump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for kernel in kittens_kernels::registry::ALL.iter() {
        let Ok(k) = kernel.build_for(Target::Gfx942) else {
            continue;
        };
        let lowered = kittens_codegen::lower(&k, Target::Gfx942).unwrap();
        let compiled = clang_for(Arch::Cdna3)
            .compile(&lowered.source, Arch::Cdna3)
            .unwrap();
        let path = dir.join(format!("{}.co", kernel.name));
        std::fs::write(&path, &compiled.code_object).unwrap();
        let out = std::process::Command::new(&objdump)
            .args(["-d", "--mcpu=gfx942"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let loaded = Kernel::load(&compiled.code_object).unwrap();
        let decoded = decode_all(&loaded.code, Arch::Cdna3).unwrap();
        // Lines `<insn text> // <address>: <words> [<name+0xoff>]` after `<address> <name>:`.
        let mut start = None;
        let mut listed = Vec::new();
        for line in text.lines() {
            if line.trim_end().ends_with(&format!("<{}>:", loaded.name)) {
                start =
                    Some(u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap());
                continue;
            }
            let (Some(base), Some((insn, rest))) = (start, line.split_once("//")) else {
                continue;
            };
            let addr = u64::from_str_radix(rest.trim().split(':').next().unwrap(), 16).unwrap();
            let mut insn = insn.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some(target) = rest.split_once(&format!("<{}+0x", loaded.name)) {
                let off = u64::from_str_radix(target.1.trim_end_matches('>').trim(), 16).unwrap();
                let m = insn.split(' ').next().unwrap().to_string();
                insn = format!("{m} pc+{off}");
            }
            listed.push((addr - base, insn));
        }
        let mut mismatches = Vec::new();
        for (d, (off, want)) in decoded.iter().zip(&listed) {
            assert_eq!(
                d.offset as u64, *off,
                "{}: instruction boundaries diverge",
                kernel.name
            );
            if &d.text() != want {
                mismatches.push(format!(
                    "{off:#x}: decoded `{}`, objdump `{want}`",
                    d.text()
                ));
            }
        }
        assert!(
            listed.len() >= decoded.len(),
            "{}: objdump listed fewer instructions",
            kernel.name
        );
        assert!(
            mismatches.is_empty(),
            "{}:\n{}",
            kernel.name,
            mismatches.join("\n")
        );
        eprintln!(
            "{} gfx942: {} instructions agree with llvm-objdump-19",
            kernel.name,
            decoded.len()
        );
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        checked, 16,
        "thirteen kernels on gfx942, the varlen forward and backward and the paged decode"
    );
}

/// The code objects the emulator tests run are built for their problems (head dim, mask, layout,
/// rotary pairing, the attention's key split and its merge), not only in the registry's default
/// configuration: each of those decodes to the listing too (the causal backward's `v_add_co_u32`
/// was missing from the decoder until this ran, the split's log-sum-exp `v_log_f32` likewise, and
/// `global_store_dwordx3` of MI300X-attn's split kernel, a gfx942 configuration).
#[test]
fn decoder_agrees_with_llvm_listing_on_problem_built_code_objects() {
    use kittens_kernels::attn::AttnLayout;
    use kittens_kernels::attn_bwd::problem::BwdProblem;
    use kittens_kernels::attn_fwd::problem::AttnProblem;
    use kittens_kernels::problem::{KernelProblem, RunSettings};
    use kittens_kernels::rotary::problem::RotaryProblem;
    let attn = |seq: usize, seq_kv: usize, dim: usize, causal: bool, bottom_right: bool| {
        let mut p = AttnProblem {
            args: AttnArgs {
                causal,
                bottom_right,
                seq_kv: Some(seq_kv),
                ..Default::default()
            },
            ..AttnProblem::default()
        };
        p.args.attn.heads = 2;
        p.args.attn.heads_kv = 1;
        p.args.attn.seq = seq;
        p.args.attn.dim = dim;
        p
    };
    let rope = |dim: usize, layout: AttnLayout, interleaved: bool| {
        let mut p = RotaryProblem {
            interleaved,
            ..RotaryProblem::default()
        };
        p.attn.dim = dim;
        p.attn.layout = layout;
        p
    };
    let mut fwd_causal = attn(150, 150, 64, true, false);
    fwd_causal.args.seq_kv = None;
    let fwd_split = AttnProblem {
        lse: true,
        kv_splits: kittens_kernels::attn_fwd::split::KvSplits::Fixed(3),
        ..attn(77, 63, 64, true, true)
    };
    let seed001_split = AttnProblem {
        lse: true,
        kv_splits: kittens_kernels::attn_fwd::split::KvSplits::Fixed(4),
        run: RunSettings {
            variant: Some(kittens_kernels::attn_fwd::problem::SEED001),
            ..attn(77, 63, 64, true, true).run
        },
        ..attn(77, 63, 64, true, true)
    };
    let bwd = |p: AttnProblem| BwdProblem::with(p.args);
    let cases: Vec<Box<dyn KernelProblem>> = vec![
        Box::new(fwd_causal),
        Box::new(fwd_split),
        Box::new(seed001_split),
        Box::new(bwd(attn(53, 70, 64, false, false))),
        Box::new(bwd(attn(45, 37, 64, true, false))),
        Box::new(bwd(attn(45, 77, 128, true, true))),
        Box::new(rope(64, AttnLayout::Bshd, false)),
        Box::new(rope(128, AttnLayout::Bhsd, true)),
    ];
    let mut seen = std::collections::HashSet::new();
    let mut checked = 0;
    for target in [Target::Gfx942, Target::Gfx950] {
        let arch = target.arch().unwrap();
        // A named variant only on its targets (`seed001`: gfx942).
        let on_target =
            |p: &dyn KernelProblem| p.settings().variant.is_none() || target == Target::Gfx942;
        for p in cases.iter().filter(|p| on_target(p.as_ref())) {
            let entry = kittens_kernels::by_name(p.kernel()).unwrap();
            let plan = p.plan(target).unwrap();
            // Every launch of the problem (a split attention's kernel and merge).
            for stage in p.stages(target, &plan).unwrap() {
                let k = stage.kernel;
                // Problems that build the same source (a runtime-only difference) are checked once.
                let source = kittens_codegen::lower(&k, target).unwrap().source;
                if !seen.insert((target, source)) {
                    continue;
                }
                let n = check_kernel(entry, &k, target, arch);
                eprintln!(
                    "{} {} {}: {n} instructions agree",
                    k.name,
                    plan.shape,
                    arch.target()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 14, "only {checked} distinct code objects");
}
