//! Reading NVRTC's PTX of a lowered kernel as a stream of the instructions the sm_90a checks are about
//! (wgmma, its waits, global f32 loads, TMA reductions), and finding its loops from their back edges.
#![allow(dead_code)]

use std::collections::HashMap;

/// One instruction of interest, in program order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inst {
    /// `wgmma.mma_async`: its shape and types (`m64n128k16.f32.bf16.bf16`) and the immediates after
    /// the scale-d predicate (scale-a, scale-b, then for bf16 transpose-A and transpose-B; for
    /// register-A forms transpose-B only).
    Wgmma { shape: String, imm: Vec<u32> },
    /// `wgmma.wait_group N`.
    Wait(u32),
    /// A 4-byte float load from global memory (`ld.global[.nc].f32`).
    LoadF32,
    /// A TMA reduction into global memory (`cp.reduce.async.bulk.tensor`).
    Reduce,
    /// `wgmma.commit_group`.
    Commit,
    /// Anything else.
    Other,
}

fn inst(line: &str) -> Inst {
    // An instruction without operands (`wgmma.commit_group.sync.aligned;`) is its opcode alone.
    let (op, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let (op, rest) = (op.trim_end_matches(';'), rest.trim().trim_end_matches(';'));
    if let Some(shape) = op.strip_prefix("wgmma.mma_async.sync.aligned.") {
        let (_, imm) = rest.rsplit_once(", p").expect("a scale-d predicate");
        let imm = imm.split(',').filter_map(|s| s.trim().parse().ok());
        Inst::Wgmma {
            shape: shape.to_string(),
            imm: imm.collect(),
        }
    } else if op.starts_with("wgmma.wait_group") {
        Inst::Wait(rest.parse().expect("a wait count"))
    } else if op == "ld.global.nc.f32" || op == "ld.global.f32" {
        Inst::LoadF32
    } else if op.starts_with("cp.reduce.async.bulk.tensor") {
        Inst::Reduce
    } else if op.starts_with("wgmma.commit_group") {
        Inst::Commit
    } else {
        Inst::Other
    }
}

/// NVRTC's PTX of a lowered kernel.
pub fn of(l: &kittens_codegen::Lowered) -> String {
    kittens_runtime::cuda::ptx(&l.source, "sm_90a").unwrap_or_else(|e| panic!("{}: {e}", l.entry))
}

/// Each line as an instruction, its guard predicate (`@%p1`) left off.
fn lines(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().map(|l| {
        let l = l.trim();
        match l.strip_prefix('@') {
            Some(p) => p
                .split_once(char::is_whitespace)
                .map_or("", |(_, r)| r.trim()),
            None => l,
        }
    })
}

/// How many instructions start with `prefix` (an opcode, or an opcode and its first operands).
pub fn count(ptx: &str, prefix: &str) -> usize {
    lines(ptx).filter(|l| l.starts_with(prefix)).count()
}

/// The PTX's instructions with their line numbers (labels and directives left out; a predicated
/// instruction counts).
pub fn insts(ptx: &str) -> Vec<(usize, Inst)> {
    lines(ptx)
        .enumerate()
        .map(|(i, l)| (i, inst(l)))
        .filter(|(_, i)| *i != Inst::Other)
        .collect()
}

/// The instructions alone, in program order.
pub fn stream(ptx: &str) -> Vec<Inst> {
    insts(ptx).into_iter().map(|(_, i)| i).collect()
}

/// Every loop as the line range from its head label to its back edge (a branch to a label above it).
pub fn loops(ptx: &str) -> Vec<std::ops::Range<usize>> {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let mut heads = std::collections::HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(label) = l.strip_suffix(':').filter(|l| l.starts_with("$L__")) {
            heads.insert(label, i);
        }
    }
    let mut out = Vec::new();
    for (j, l) in lines.iter().enumerate() {
        let Some((_, target)) = l.split_once("bra") else {
            continue;
        };
        let target = target
            .trim_start_matches(".uni")
            .trim()
            .trim_end_matches(';');
        if let Some(&i) = heads.get(target).filter(|&&i| i < j) {
            out.push(i..j + 1);
        }
    }
    out
}

/// The instructions of the innermost loop that holds the most wgmmas: a consumer's step loop.
pub fn step_loop(ptx: &str) -> Vec<Inst> {
    let all = insts(ptx);
    let within = |r: &std::ops::Range<usize>| -> Vec<Inst> {
        all.iter()
            .filter(|(i, _)| r.contains(i))
            .map(|(_, x)| x.clone())
            .collect()
    };
    let wgmmas = |v: &[Inst]| v.iter().filter(|x| matches!(x, Inst::Wgmma { .. })).count();
    let best = loops(ptx)
        .into_iter()
        .map(|r| (wgmmas(&within(&r)), std::cmp::Reverse(r.len()), r))
        .max_by_key(|(n, len, _)| (*n, *len))
        .expect("a loop");
    assert!(best.0 > 0, "no loop issues a wgmma");
    within(&best.2)
}

/// How many 4-byte float loads from global memory `v` holds.
pub fn f32_loads(v: &[Inst]) -> usize {
    v.iter().filter(|x| **x == Inst::LoadF32).count()
}

/// The operands of each instruction starting with `opcode`, each constant one resolved (an immediate,
/// or a register whose last write was a `mov` of a constant), `None` otherwise.
pub fn constant_operands(ptx: &str, opcode: &str) -> Vec<Vec<Option<u64>>> {
    let mut consts: HashMap<&str, u64> = HashMap::new();
    let mut out = Vec::new();
    for line in lines(ptx) {
        let Some((op, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let operands: Vec<&str> = rest
            .trim_end_matches(';')
            .split(',')
            .map(str::trim)
            .collect();
        if op.starts_with(opcode) {
            let value = |o: &&str| o.parse().ok().or_else(|| consts.get(*o).copied());
            out.push(operands.iter().map(value).collect());
        } else if let Some(dst) = operands.first().filter(|d| d.starts_with('%')) {
            match (
                op.starts_with("mov."),
                operands.get(1).map(|s| s.parse::<u64>()),
            ) {
                (true, Some(Ok(v))) => consts.insert(dst, v),
                _ => consts.remove(dst),
            };
        }
    }
    out
}

/// The value of each `mbarrier` instruction's count operand (`opcode` e.g. `mbarrier.init`): its last
/// operand, which must be a constant.
pub fn mbarrier_counts(ptx: &str, opcode: &str) -> Vec<u64> {
    constant_operands(ptx, opcode)
        .into_iter()
        .map(|ops| {
            ops.last()
                .copied()
                .flatten()
                .unwrap_or_else(|| panic!("`{opcode}`: the count is not a constant"))
        })
        .collect()
}

/// Whether `v` holds a wgmma with these immediates after its predicate (`[1, 1, ta, tb]` for bf16 from
/// shared memory, `[1, 1, tb]` for bf16 with A from registers).
pub fn has_wgmma(v: &[Inst], imm: &[u32]) -> bool {
    v.iter()
        .any(|i| matches!(i, Inst::Wgmma { imm: m, .. } if m == imm))
}
